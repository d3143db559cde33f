// The Redis client under `fak serve --store`: Debian's hiredis (synchronous API), one connection
// per RedisConnection, and a RedisPool that hands connections to any thread and keeps the store's
// health: a call that fails (refused, reset, timed out) marks the store down, logs one line, and
// every call during the backoff that follows is skipped at once (the caller serves from local
// memory); the first call after it tries again, and a success logs that the store is back.
//
// Timeouts are per socket read or write (SO_RCVTIMEO / SO_SNDTIMEO through redisSetTimeout), so a
// dead or stopped Redis trips them quickly while a transfer of hundreds of MiB that keeps moving
// does not.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/anon_memory.h"
#include "core/error.h"

struct redisContext;

namespace fak::store {

// redis://[user:password@]host:port[/db], or
// redis-sentinel://[user:password@]host:port[,host:port...]/primary-name[/db]: Redis Sentinel
// (high availability): the sentinels are asked where the primary is, on every new connection, so
// a failover is followed. The user and password are the data nodes' (sentinels are reached
// without one). rediss:// is refused: Debian's hiredis (0.14) has no TLS.
struct RedisUrl {
  std::string host;
  int port = 6379;
  std::string user, password;
  int db = 0;
  std::vector<std::pair<std::string, int>> sentinels;  // redis-sentinel://: where to ask
  std::string primary_name;                            // redis-sentinel://: which primary
  std::string shown;  // the URL without its password, for log lines
};
// Throws fak::Error naming --store and what is wrong.
RedisUrl parse_redis_url(const std::string& url);

struct RedisReply {
  enum class Type { Nil, Integer, String, Status, Error, Array };
  Type type = Type::Nil;
  long long integer = 0;
  std::string str;  // String, Status, Error
  // A large String read into a BulkArena: its bytes are `bulk` (str is empty), kept by `owner`.
  std::string_view bulk;
  std::shared_ptr<const void> owner;
  std::vector<RedisReply> elements;
  bool nil() const { return type == Type::Nil; }
  bool error() const { return type == Type::Error; }
  std::string_view text() const { return owner ? bulk : std::string_view(str); }
};

// Memory for large bulk replies (KV blocks of a MiB or more), carved from chunks of anonymous
// memory advised for huge pages. note: this is what makes a resume fast: hundreds of MiB of
// fresh 4 KiB heap pages cost more in page faults than reading them from Redis (measured: 2.2 s
// for 600 MiB on this machine, 0.2 s in 2 MiB pages). A chunk is freed with the last reply in it.
class BulkArena {
 public:
  explicit BulkArena(size_t chunk_bytes = size_t(64) << 20) : chunk_bytes_(chunk_bytes) {}
  // n bytes, valid while the owner lives.
  char* allocate(size_t n, std::shared_ptr<const void>* owner);

 private:
  size_t chunk_bytes_;
  std::shared_ptr<AnonMemory> chunk_;
  size_t used_ = 0;
};

// The store cannot be reached (connect, I/O, timeout): the caller serves without it.
class StoreUnavailable : public Error {
 public:
  using Error::Error;
};

using RedisArgs = std::vector<std::string_view>;

// One connection; not thread-safe. Connects on first use and again after a failure.
class RedisConnection {
 public:
  RedisConnection(RedisUrl url, std::chrono::milliseconds timeout);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Sends every command, then reads every reply (one round trip). A Redis error is a reply of
  // type Error; StoreUnavailable when the connection fails (it is then closed). With an arena,
  // bulk strings of 64 KiB or more are read into it (RedisReply::bulk).
  std::vector<RedisReply> pipeline(const std::vector<RedisArgs>& commands,
                                   BulkArena* arena = nullptr);
  RedisReply command(const RedisArgs& args);
  // The bytes sent and received since reset_counters() (arguments and bulk replies).
  size_t bytes_out() const { return bytes_out_; }
  size_t bytes_in() const { return bytes_in_; }
  void reset_counters() { bytes_out_ = bytes_in_ = 0; }

 private:
  void connect();
  void connect_to(const std::string& host, int port);
  // redis-sentinel://: where the sentinels say the primary is now.
  std::pair<std::string, int> find_primary();
  void close();
  RedisReply read_reply(int depth, BulkArena* arena);
  std::string_view read_line();
  size_t read_some(char* dst, size_t n);
  RedisUrl url_;
  std::chrono::milliseconds timeout_;
  redisContext* ctx_ = nullptr;
  std::string in_;  // bytes read from the socket, [in_pos_, in_end_) not parsed yet
  size_t in_pos_ = 0, in_end_ = 0;
  size_t bytes_out_ = 0, bytes_in_ = 0;
};

// Calls the store does not answer in time, in a pool every thread shares.
struct RedisPoolOptions {
  std::chrono::milliseconds timeout{250};       // per read / write / connect
  std::chrono::milliseconds backoff_min{100};   // after the first failure
  std::chrono::milliseconds backoff_max{5000};  // doubling up to this
  size_t idle_connections = 8;                  // kept open between calls
};

class RedisPool {
 public:
  using Log = std::function<void(const std::string& line)>;
  // Observes each call: seconds it took, bytes out and in, and whether it failed.
  using Observe = std::function<void(double seconds, size_t out, size_t in, bool failed)>;
  RedisPool(RedisUrl url, RedisPoolOptions options, Log log, Observe observe = nullptr);
  ~RedisPool();

  // Runs fn on a connection. False, without calling fn, while the store is backing off after a
  // failure (unless force: a caller with nothing else to serve tries anyway); false when fn
  // throws StoreUnavailable (the store is then marked down). Other exceptions pass through.
  // fn may run twice: a failure on a connection kept idle (which may have died with a Redis that
  // restarted or failed over since) is tried once more on a new connection, so fn must be safe
  // to repeat (session writes are: a retry carries the same version id).
  bool run(const std::function<void(RedisConnection&)>& fn, bool force = false);
  // Whether the last call reached the store (no backoff pending).
  bool up() const { return !down_.load(); }
  // Increments each time the store comes back after being down (so watchers can catch up).
  uint64_t recoveries() const { return recoveries_.load(); }
  const RedisUrl& url() const { return url_; }
  std::chrono::milliseconds timeout() const { return options_.timeout; }

 private:
  std::unique_ptr<RedisConnection> take(bool* reused);
  void give_back(std::unique_ptr<RedisConnection> c);
  void failed(const std::string& why);
  void succeeded();

  RedisUrl url_;
  RedisPoolOptions options_;
  Log log_;
  Observe observe_;
  std::mutex mu_;
  std::vector<std::unique_ptr<RedisConnection>> idle_;
  std::atomic<bool> down_{false};
  std::atomic<uint64_t> recoveries_{0};
  std::chrono::steady_clock::time_point retry_at_{};
  std::chrono::milliseconds backoff_{0};
};

}  // namespace fak::store
