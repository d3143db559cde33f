// The prefix cache shared through the store (`fak serve --store`): every KV block a replica caches
// is published to Redis under a content address (store/store_keys.h: the model, the KV layout, the
// tenant's partition and every token up to the block's end), and a replica that misses locally
// looks there before it prefills. What it loads is the computing replica's bytes, checked whole
// (runtime/prefix_record.h: checksum, model, layout, partition, key, tokens): bit-identical to
// computing it, since a dense model's KV for a token prefix depends on nothing else and a hybrid's
// is only shared up to a state checkpoint that ends a block (the prefix cache's own along a long
// prompt, every kCheckpointEvery tokens; a request's end rarely falls on a block boundary, so the
// last < 1024 tokens of a hybrid's prompt are recomputed by a replica that loads it). A damaged or
// foreign record ends the lookup there with one log line; the rest is prefilled.
//
// Threads: fetch runs on the HTTP worker that submits the request (network I/O never stalls the
// scheduler); install, collect and publish run on the scheduler thread (they touch the KV cache);
// uploads go out on a thread of their own, in the background, or on the caller's (sessions, which
// must be in the store before their reply).
//
// Eviction: records carry a TTL (refreshed when read) and Redis evicts them under its own
// maxmemory with the volatile-lru policy (deploy/redis.conf); sessions have no TTL, so Redis never
// evicts them for blocks. A block a replica remembers publishing is not sent again for a while.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "runtime/prefix_cache.h"
#include "runtime/prefix_record.h"
#include "store/redis_client.h"
#include "store/store_metrics.h"

namespace fak::store {

struct BlockUpload {
  std::string key;
  std::string bytes;
};

// What the store had of one prompt's blocks beyond the local cache: consecutive, checked.
struct Prefetched {
  std::string partition;
  size_t first = 0;  // the block index of records[0]
  std::vector<PrefixRecord> records;
};

struct BlockStoreOptions {
  std::chrono::seconds ttl{7 * 24 * 3600};
  size_t max_queue_bytes = size_t(256) << 20;  // waiting for the uploader; more are dropped
  // Blocks read per round trip. note: small on purpose: Redis serves a pipeline of many
  // MiB-sized replies several times slower than a few at a time (measured: 16 x 1.2 MB at
  // 200 MB/s, 1-4 at 1.1 GB/s, Redis 7.0 on loopback).
  size_t fetch_batch = 4;
  // Threads reading one prompt's blocks at once, each on its own connection (a long resume:
  // the network, page faults and checksums of one overlap the other's).
  size_t fetch_readers = 2;
  size_t upload_bytes = size_t(8) << 20;  // written per round trip (hiredis's output buffer)
};

class BlockStore {
 public:
  using Log = std::function<void(const std::string& line)>;
  BlockStore(RedisPool& pool, std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache,
             StoreMetrics& metrics, Log log, BlockStoreOptions options = {});
  ~BlockStore();  // stops the uploader; what it has not sent is dropped
  BlockStore(const BlockStore&) = delete;
  BlockStore& operator=(const BlockStore&) = delete;

  const std::string& ns() const { return ns_; }
  RedisPool& pool() { return pool_; }
  StoreMetrics& metrics() { return metrics_; }

  // Any thread but the scheduler's: the blocks of tokens (at most tokens.size() - 1 of them, as
  // PrefixCache::acquire reuses) the store holds beyond what `cache` holds. Null when there are
  // none, or the store is down.
  std::shared_ptr<Prefetched> fetch(const PrefixCache& cache, const std::string& partition,
                                    std::span<const int32_t> tokens);
  // Scheduler thread: into the prefix cache (so acquire then reuses them). Returns the blocks
  // taken: none when the KV budget has no room or the local blocks before them went meanwhile.
  size_t install(PrefixCache& cache, std::span<const int32_t> tokens, Prefetched& p);
  // Scheduler thread: the session's whole blocks (hybrid: up to its deepest checkpoint) this
  // replica has not published lately, as records.
  std::vector<BlockUpload> collect(const std::string& partition, const Session& session);
  // Scheduler thread: collect, queued for the uploader thread.
  void publish(const std::string& partition, const Session& session);
  // Any thread: writes them now. False when the store is unreachable or refused one.
  bool upload(const std::vector<BlockUpload>& uploads);
  // Waits until the uploader's queue is empty, or the deadline.
  void flush(std::chrono::steady_clock::time_point deadline);
  // A pool call that counts the calls skipped while the store backs off.
  bool call(const std::function<void(RedisConnection&)>& fn, bool force = false);
  // Logs a refusal (e.g. Redis out of memory) at most once a minute.
  void refused(const std::string& what, const std::string& why);

 private:
  bool known(const std::string& key);
  void mark_known(const std::string& key);
  void uploader();

  RedisPool& pool_;
  std::shared_ptr<const Model> model_;
  std::shared_ptr<KvCache> cache_;
  StoreMetrics& metrics_;
  Log log_;
  BlockStoreOptions options_;
  std::string ns_, ttl_;
  std::chrono::seconds known_for_;

  std::mutex known_mu_;
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> known_;

  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  struct Queued {
    std::vector<BlockUpload> blocks;
    std::chrono::steady_clock::time_point since;  // when the reply's blocks were queued
  };
  std::deque<Queued> queue_;
  size_t queued_bytes_ = 0;
  bool uploading_ = false, stopping_ = false;
  std::chrono::steady_clock::time_point last_refusal_log_{};
  std::thread thread_;
};

}  // namespace fak::store
