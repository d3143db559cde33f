#include "store/block_store.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>

#include "store/store_keys.h"

namespace fak::store {

BlockStore::BlockStore(RedisPool& pool, std::shared_ptr<const Model> model,
                       std::shared_ptr<KvCache> cache, StoreMetrics& metrics, Log log,
                       BlockStoreOptions options)
    : pool_(pool),
      model_(std::move(model)),
      cache_(std::move(cache)),
      metrics_(metrics),
      log_(log ? std::move(log) : [](const std::string&) {}),
      options_(options) {
  ns_ = store_namespace(*model_, *cache_);
  ttl_ = std::to_string(std::max<int64_t>(1, options_.ttl.count()));
  // Sent again after half its TTL at most, so a block still in use is written (and its TTL
  // renewed) before it expires.
  known_for_ = std::min<std::chrono::seconds>(options_.ttl / 2, std::chrono::hours(1));
  thread_ = std::thread([this] { uploader(); });
}

BlockStore::~BlockStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool BlockStore::call(const std::function<void(RedisConnection&)>& fn, bool force) {
  if (pool_.run(fn, force)) return true;
  if (!pool_.up()) metrics_.add_skipped();
  return false;
}

void BlockStore::refused(const std::string& what, const std::string& why) {
  metrics_.add_refused();
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now - last_refusal_log_ < std::chrono::minutes(1)) return;
  last_refusal_log_ = now;
  log_("warning: store " + pool_.url().shown + " refused " + what + ": " + why);
}

bool BlockStore::known(const std::string& key) {
  std::lock_guard<std::mutex> lock(known_mu_);
  const auto it = known_.find(key);
  return it != known_.end() && std::chrono::steady_clock::now() - it->second < known_for_;
}

void BlockStore::mark_known(const std::string& key) {
  std::lock_guard<std::mutex> lock(known_mu_);
  // A bound on memory: forgetting only costs a block sent twice.
  if (known_.size() >= (size_t(1) << 20)) known_.clear();
  known_[key] = std::chrono::steady_clock::now();
}

std::shared_ptr<Prefetched> BlockStore::fetch(const PrefixCache& cache,
                                              const std::string& partition,
                                              std::span<const int32_t> tokens) {
  const int bs = cache_->block_size();
  const size_t max_blocks = tokens.empty() ? 0 : (tokens.size() - 1) / size_t(bs);
  const size_t local = cache.cached_blocks(partition, tokens);
  if (local >= max_blocks) return nullptr;
  const std::vector<std::string> keys = block_keys(ns_, partition, tokens, bs, max_blocks);
  // Per block: its record, or why the run of blocks ends there (missing: an empty message).
  const size_t n_blocks = max_blocks - local;
  std::vector<std::optional<PrefixRecord>> got(n_blocks);
  std::vector<std::string> why(n_blocks);
  std::atomic<size_t> end{n_blocks};  // the first block known not to load
  const auto stop_at = [&](size_t i) {
    for (size_t e = end.load(); i < e && !end.compare_exchange_weak(e, i);) {
    }
  };
  // Reader r takes batches r, r + readers, ...: its own connection, arena and parsing, so reads
  // from the store, page faults and checksums of one reader overlap the other's.
  const size_t batch = options_.fetch_batch;
  const size_t batches = (n_blocks + batch - 1) / batch;
  const size_t readers = std::min<size_t>(std::max<size_t>(1, options_.fetch_readers), batches);
  const auto read = [&](size_t r) {
    BulkArena arena;
    for (size_t k = r; k < batches && k * batch < end.load(); k += readers) {
      const size_t first = k * batch, n = std::min(batch, n_blocks - first);
      std::vector<RedisArgs> cmds;
      for (size_t j = 0; j < n; ++j) cmds.push_back({"GETEX", keys[local + first + j], "EX", ttl_});
      std::vector<RedisReply> replies;
      if (!call([&](RedisConnection& c) { replies = c.pipeline(cmds, &arena); })) {
        stop_at(first);
        return;
      }
      for (size_t j = 0; j < n; ++j) {
        RedisReply& reply = replies[j];
        const size_t i = local + first + j;
        const std::string& key = keys[i];
        if (reply.error()) refused("a read", reply.str);
        if (reply.type != RedisReply::Type::String) {
          stop_at(first + j);
          return;
        }
        try {
          const std::string label = "store record " + key;
          PrefixRecord rec =
              reply.owner
                  ? PrefixRecord::parse(reply.bulk, std::move(reply.owner), *model_, *cache_, label)
                  : PrefixRecord::parse(std::move(reply.str), *model_, *cache_, label);
          const auto& h = rec.header();
          if (rec.size() != 1 || rec.depth() != int(i) || rec.partition() != partition ||
              !h.contains("key") || h["key"] != key ||
              rec.tokens(0) != std::vector<int32_t>(tokens.begin() + long(i) * bs,
                                                    tokens.begin() + long(i + 1) * bs))
            fail(label + " is not the block its key names (a foreign record)");
          got[first + j] = std::move(rec);
        } catch (const Error& e) {
          why[first + j] = e.what();
          stop_at(first + j);
          return;
        }
      }
    }
  };
  // note: nothing may escape a reader: on a thread of its own an exception (memory for a reply,
  // a mapping refused) would end the process. What fails ends the lookup there; the rest is
  // prefilled.
  const auto read_guarded = [&](size_t r) {
    try {
      read(r);
    } catch (const std::exception& e) {
      why[0] = std::string("reading from the store: ") + e.what();
      stop_at(0);
    }
  };
  if (readers > 1) {
    std::vector<std::thread> others;
    for (size_t r = 1; r < readers; ++r) others.emplace_back(read_guarded, r);
    read_guarded(0);
    for (auto& t : others) t.join();
  } else {
    read_guarded(0);
  }
  auto p = std::make_shared<Prefetched>();
  p->partition = partition;
  p->first = local;
  for (size_t j = 0; j < n_blocks && got[j]; ++j) {
    mark_known(keys[local + j]);
    p->records.push_back(std::move(*got[j]));
  }
  if (const size_t j = p->records.size(); j < n_blocks && !why[j].empty()) {
    metrics_.add_damaged();
    log_("warning: " + why[j] + "; skipped, the block is prefilled instead");
  }
  // A hybrid restarts from a checkpoint: blocks past the deepest one are of no use.
  if (model_->config().is_hybrid())
    while (!p->records.empty() && !p->records.back().has_checkpoint(0)) p->records.pop_back();
  if (pool_.up()) metrics_.add_lookup(p->records.size());
  if (p->records.empty()) return nullptr;
  return p;
}

size_t BlockStore::install(PrefixCache& cache, std::span<const int32_t> tokens, Prefetched& p) {
  const int bs = cache_->block_size();
  std::vector<int32_t> blocks;
  std::vector<std::shared_ptr<const StateCheckpoint>> cps;
  try {
    for (const PrefixRecord& r : p.records) {
      blocks.push_back(r.load_block(0, *cache_));
      cps.push_back(r.checkpoint(0, *model_, cache_));
    }
  } catch (const std::exception&) {
    // The KV budget has no room for them (after the cache gave back what it could): prefill.
    for (int32_t b : blocks) cache_->release(b);
    p.records.clear();
    return 0;
  }
  p.records.clear();
  const size_t end = p.first + blocks.size();
  if (end * size_t(bs) > tokens.size()) {
    for (int32_t b : blocks) cache_->release(b);
    return 0;
  }
  return cache.adopt(p.partition, tokens.first(end * size_t(bs)), std::move(blocks),
                     std::move(cps));
}

std::vector<BlockUpload> BlockStore::collect(const std::string& partition, const Session& session) {
  const int bs = cache_->block_size();
  const auto& tokens = session.tokens();
  size_t full = tokens.size() / size_t(bs);
  // Hybrid: as PrefixCache::insert, only blocks up to the deepest checkpoint, which ride
  // with the block they end.
  std::map<size_t, std::shared_ptr<const StateCheckpoint>> cps;
  if (model_->config().is_hybrid()) {
    for (const auto& cp : session.checkpoints())
      if (cp->pos() > 0 && cp->pos() % bs == 0 && size_t(cp->pos() / bs) <= full)
        cps[size_t(cp->pos() / bs)] = cp;
    full = cps.empty() ? 0 : cps.rbegin()->first;
  }
  std::vector<BlockUpload> out;
  if (full == 0) return out;
  const std::vector<std::string> keys = block_keys(ns_, partition, tokens, bs, full);
  for (size_t i = 0; i < full; ++i) {
    if (known(keys[i])) continue;
    PrefixRecordBlock b;
    b.tokens.assign(tokens.begin() + long(i) * bs, tokens.begin() + long(i + 1) * bs);
    b.block = session.blocks()[i];
    if (auto it = cps.find(i + 1); it != cps.end()) b.checkpoint = it->second;
    out.push_back({keys[i], write_prefix_record(*model_, *cache_, partition, int(i), {&b, 1},
                                                {{"key", keys[i]}})});
  }
  return out;
}

void BlockStore::publish(const std::string& partition, const Session& session) {
  // Down: what would be serialized now would be dropped by the uploader anyway.
  if (!pool_.up()) return;
  std::vector<BlockUpload> u = collect(partition, session);
  if (u.empty()) return;
  size_t bytes = 0;
  for (const auto& b : u) bytes += b.bytes.size();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queued_bytes_ + bytes > options_.max_queue_bytes) {
      metrics_.add_dropped_upload();
      return;
    }
    queued_bytes_ += bytes;
    queue_.push_back({std::move(u), std::chrono::steady_clock::now()});
    metrics_.set_queue_bytes(queued_bytes_);
  }
  cv_.notify_all();
}

bool BlockStore::upload(const std::vector<BlockUpload>& uploads) {
  bool ok = true;
  // In pieces of a few MiB: hiredis keeps a pipeline's commands in one buffer and moves what is
  // left of it after every partial write, which costs the square of its size.
  for (size_t at = 0; at < uploads.size();) {
    std::vector<RedisArgs> cmds;
    size_t bytes = 0, first = at;
    for (; at < uploads.size() && (cmds.empty() || bytes < options_.upload_bytes); ++at) {
      cmds.push_back({"SET", uploads[at].key, uploads[at].bytes, "EX", ttl_});
      bytes += uploads[at].bytes.size();
    }
    std::vector<RedisReply> replies;
    if (!call([&](RedisConnection& c) { replies = c.pipeline(cmds); })) return false;
    size_t written = 0;
    for (size_t i = 0; i < replies.size(); ++i) {
      if (replies[i].error()) {
        ok = false;
        refused("a block", replies[i].str);
        continue;
      }
      mark_known(uploads[first + i].key);
      ++written;
    }
    metrics_.add_published(written);
  }
  return ok;
}

void BlockStore::uploader() {
  for (;;) {
    std::vector<BlockUpload> batch;
    std::chrono::steady_clock::time_point since;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      batch = std::move(queue_.front().blocks);
      since = queue_.front().since;
      queue_.pop_front();
      uploading_ = true;
      metrics_.set_oldest_queued(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count());
    }
    size_t bytes = 0;
    for (const auto& b : batch) bytes += b.bytes.size();
    // A cache: what the store cannot take now is dropped, not retried. note: nothing may escape
    // this thread (the process would end): a failure is a batch not written.
    bool uploaded = false;
    try {
      uploaded = upload(batch);
    } catch (const std::exception& e) {
      refused("blocks", e.what());
    }
    if (uploaded)
      metrics_.observe_publish_lag(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count());
    else
      metrics_.add_dropped_upload();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queued_bytes_ -= bytes;
      uploading_ = false;
      metrics_.set_queue_bytes(queued_bytes_);
      metrics_.set_oldest_queued(queue_.empty()
                                     ? 0.0
                                     : std::chrono::duration<double>(
                                           std::chrono::steady_clock::now() - queue_.front().since)
                                           .count());
    }
    idle_cv_.notify_all();
  }
}

void BlockStore::flush(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait_until(lock, deadline, [&] { return queue_.empty() && !uploading_; });
}

}  // namespace fak::store
