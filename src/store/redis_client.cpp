#include "store/redis_client.h"

#include <hiredis.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <tuple>

namespace fak::store {

namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = long(ms.count() / 1000);
  tv.tv_usec = long((ms.count() % 1000) * 1000);
  return tv;
}

// %XX escapes in the user and password parts.
std::string unescape(std::string_view s, const std::string& flag) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) fail(flag + ": a '%' escape is cut short in the URL");
    const std::string hex(s.substr(i + 1, 2));
    char* end = nullptr;
    const long v = std::strtol(hex.c_str(), &end, 16);
    if (hex.size() != 2 || *end) fail(flag + ": '%" + hex + "' is not a %XX escape");
    out += char(v);
    i += 2;
  }
  return out;
}

int parse_int(std::string_view s, int lo, int hi, const std::string& what) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string_view::npos)
    fail(what);
  const int v = std::atoi(std::string(s).c_str());
  if (v < lo || v > hi) fail(what);
  return v;
}

}  // namespace

RedisUrl parse_redis_url(const std::string& url) {
  const std::string flag = "--store";
  RedisUrl u;
  std::string_view s = url;
  if (s.rfind("rediss://", 0) == 0)
    fail(flag + " " + url.substr(0, 9) +
         "...: TLS is not available: this fak uses Debian's hiredis 0.14, which has no TLS "
         "support; use redis:// (over a private network, or a TLS tunnel such as stunnel)");
  const bool sentinel = s.rfind("redis-sentinel://", 0) == 0;
  const std::string bad = flag + ": '" + url.substr(0, 64) +
                          "' is not a redis://[user:password@]host:port[/db] or "
                          "redis-sentinel://[user:password@]host:port[,host:port...]/primary[/db] "
                          "URL";
  if (!sentinel && s.rfind("redis://", 0) != 0) fail(bad);
  s.remove_prefix(sentinel ? 17 : 8);
  std::string_view auth;
  if (const size_t at = s.rfind('@'); at != std::string_view::npos) {
    auth = s.substr(0, at);
    s.remove_prefix(at + 1);
  }
  std::string_view hostport = s, db;
  if (const size_t slash = s.find('/'); slash != std::string_view::npos) {
    hostport = s.substr(0, slash);
    db = s.substr(slash + 1);
  }
  if (sentinel) {  // primary-name[/db]
    const size_t slash = db.find('/');
    u.primary_name = std::string(db.substr(0, slash));
    db = slash == std::string_view::npos ? std::string_view() : db.substr(slash + 1);
    if (u.primary_name.empty())
      fail(flag +
           ": a redis-sentinel:// URL names the primary after the sentinels: "
           "redis-sentinel://host:port[,host:port...]/primary-name");
  }
  const auto host_and_port = [&](std::string_view hp, int default_port) {
    std::pair<std::string, int> out{"", default_port};
    if (hp.empty()) fail(bad);
    if (hp.front() == '[') {  // [::1]:6379
      const size_t close = hp.find(']');
      if (close == std::string_view::npos) fail(bad);
      out.first = std::string(hp.substr(1, close - 1));
      hp.remove_prefix(close + 1);
      if (!hp.empty()) {
        if (hp.front() != ':') fail(bad);
        out.second = parse_int(hp.substr(1), 1, 65535, flag + ": the port must be 1-65535");
      }
    } else if (const size_t colon = hp.rfind(':'); colon != std::string_view::npos) {
      out.first = std::string(hp.substr(0, colon));
      out.second = parse_int(hp.substr(colon + 1), 1, 65535, flag + ": the port must be 1-65535");
    } else {
      out.first = std::string(hp);
    }
    if (out.first.empty()) fail(bad);
    return out;
  };
  const auto shown_host = [](const std::pair<std::string, int>& hp) {
    return (hp.first.find(':') != std::string::npos ? "[" + hp.first + "]" : hp.first) + ":" +
           std::to_string(hp.second);
  };
  std::string hosts_shown;
  if (sentinel) {
    for (size_t at = 0; at <= hostport.size();) {
      const size_t comma = std::min(hostport.find(',', at), hostport.size());
      u.sentinels.push_back(host_and_port(hostport.substr(at, comma - at), 26379));
      hosts_shown += (hosts_shown.empty() ? "" : ",") + shown_host(u.sentinels.back());
      at = comma + 1;
    }
  } else {
    std::tie(u.host, u.port) = host_and_port(hostport, 6379);
    hosts_shown = shown_host({u.host, u.port});
  }
  if (!db.empty()) u.db = parse_int(db, 0, 1 << 20, flag + ": the database must be a number");
  if (!auth.empty()) {
    const size_t colon = auth.find(':');
    if (colon == std::string_view::npos) {
      u.password = unescape(auth, flag);  // redis://password@host, as redis-cli -u reads it
    } else {
      u.user = unescape(auth.substr(0, colon), flag);
      u.password = unescape(auth.substr(colon + 1), flag);
    }
  }
  u.shown = std::string(sentinel ? "redis-sentinel://" : "redis://") +
            (u.user.empty() && u.password.empty() ? "" : u.user + ":***@") + hosts_shown +
            (sentinel ? "/" + u.primary_name : "") + (u.db ? "/" + std::to_string(u.db) : "");
  return u;
}

RedisConnection::RedisConnection(RedisUrl url, std::chrono::milliseconds timeout)
    : url_(std::move(url)), timeout_(timeout) {}

RedisConnection::~RedisConnection() {
  close();
}

void RedisConnection::close() {
  if (ctx_) redisFree(ctx_);
  ctx_ = nullptr;
}

std::pair<std::string, int> RedisConnection::find_primary() {
  std::string why = "no sentinel answered";
  for (const auto& [host, port] : url_.sentinels) {
    redisContext* c = redisConnectWithTimeout(host.c_str(), port, to_timeval(timeout_));
    if (!c || c->err) {
      why = "sentinel " + host + ":" + std::to_string(port) + ": " + (c ? c->errstr : "no memory");
      if (c) redisFree(c);
      continue;
    }
    redisSetTimeout(c, to_timeval(timeout_));
    const char* argv[] = {"SENTINEL", "get-master-addr-by-name", url_.primary_name.c_str()};
    const size_t len[] = {8, 23, url_.primary_name.size()};
    auto* r = static_cast<redisReply*>(redisCommandArgv(c, 3, argv, len));
    std::pair<std::string, int> out{"", 0};
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING)
      out = {std::string(r->element[0]->str, r->element[0]->len), std::atoi(r->element[1]->str)};
    else
      why = "sentinel " + host + ":" + std::to_string(port) + " knows no primary '" +
            url_.primary_name + "'";
    if (r) freeReplyObject(r);
    redisFree(c);
    if (out.second > 0) return out;
  }
  throw StoreUnavailable(url_.shown + ": " + why);
}

void RedisConnection::connect() {
  if (url_.sentinels.empty()) return connect_to(url_.host, url_.port);
  const auto [host, port] = find_primary();
  connect_to(host, port);
  // A sentinel's answer can be a moment old (a failover under way): only a primary is used.
  const RedisReply role = command({"ROLE"});
  if (role.type != RedisReply::Type::Array || role.elements.empty() ||
      role.elements[0].str != "master") {
    close();
    throw StoreUnavailable(url_.shown + ": " + host + ":" + std::to_string(port) +
                           " is not the primary (a failover under way)");
  }
}

void RedisConnection::connect_to(const std::string& host, int port) {
  ctx_ = redisConnectWithTimeout(host.c_str(), port, to_timeval(timeout_));
  if (!ctx_ || ctx_->err) {
    const std::string why = ctx_ ? ctx_->errstr : "out of memory";
    close();
    throw StoreUnavailable("cannot connect to " + url_.shown + ": " + why);
  }
  redisSetTimeout(ctx_, to_timeval(timeout_));
  redisEnableKeepAlive(ctx_);
  std::vector<std::vector<std::string>> setup;
  if (!url_.password.empty()) {
    if (url_.user.empty())
      setup.push_back({"AUTH", url_.password});
    else
      setup.push_back({"AUTH", url_.user, url_.password});
  }
  if (url_.db) setup.push_back({"SELECT", std::to_string(url_.db)});
  redisContext* c = ctx_;
  for (const auto& a : setup) {
    std::vector<const char*> argv;
    std::vector<size_t> len;
    for (const std::string& s : a) {
      argv.push_back(s.data());
      len.push_back(s.size());
    }
    auto* r =
        static_cast<redisReply*>(redisCommandArgv(c, int(argv.size()), argv.data(), len.data()));
    if (!r) {
      const std::string why = c->errstr;
      close();
      throw StoreUnavailable(url_.shown + ": " + why);
    }
    const bool refused = r->type == REDIS_REPLY_ERROR;
    const std::string msg = refused ? std::string(r->str, r->len) : "";
    freeReplyObject(r);
    if (refused) {
      close();
      throw StoreUnavailable(url_.shown + " refused " + a[0] + ": " + msg);
    }
  }
}

char* BulkArena::allocate(size_t n, std::shared_ptr<const void>* owner) {
  if (!chunk_ || chunk_->size() - used_ < n) {
    chunk_ = std::make_shared<AnonMemory>(std::max(n, chunk_bytes_), "a store reply");
    used_ = 0;
  }
  char* p = reinterpret_cast<char*>(chunk_->data()) + used_;
  used_ += (n + 63) / 64 * 64;
  used_ = std::min(used_, chunk_->size());
  *owner = chunk_;
  return p;
}

std::vector<RedisReply> RedisConnection::pipeline(const std::vector<RedisArgs>& commands,
                                                  BulkArena* arena) {
  if (!ctx_) connect();
  std::vector<const char*> argv;
  std::vector<size_t> len;
  for (const RedisArgs& a : commands) {
    argv.clear();
    len.clear();
    for (std::string_view s : a) {
      argv.push_back(s.data());
      len.push_back(s.size());
      bytes_out_ += s.size();
    }
    if (redisAppendCommandArgv(ctx_, int(argv.size()), argv.data(), len.data()) != REDIS_OK) {
      close();
      throw StoreUnavailable(url_.shown + ": out of memory building a command");
    }
  }
  const auto lost = [&](const std::string& why) {
    close();
    return StoreUnavailable(url_.shown + ": " + why);
  };
  for (int done = 0; !done;)
    if (redisBufferWrite(ctx_, &done) != REDIS_OK)
      throw lost(ctx_->errstr[0] ? ctx_->errstr : "write failed");
  // note: replies are parsed here, not by hiredis: a KV block is a MiB or more, and hiredis
  // copies each one three times (its read buffer, which it also moves as it consumes it, then the
  // reply object, then ours), in 16 KiB reads. Here a bulk string is read straight into the
  // std::string the caller keeps, in as few reads as the socket allows.
  in_pos_ = in_end_ = 0;
  std::vector<RedisReply> out;
  out.reserve(commands.size());
  try {
    while (out.size() < commands.size()) out.push_back(read_reply(0, arena));
  } catch (const StoreUnavailable& e) {
    throw lost(e.what());
  }
  // A node that is no longer (or not yet) the primary: the connection goes, and the next one
  // asks the sentinels again. Not a refusal of what was sent: the store is unavailable.
  for (const RedisReply& r : out)
    // NOREPLICAS: a primary under min-replicas-to-write that cannot reach a replica (Redis's
    // guard against a split brain): no write may land there now.
    if (r.error() &&
        (r.str.rfind("READONLY", 0) == 0 || r.str.rfind("MASTERDOWN", 0) == 0 ||
         r.str.rfind("LOADING", 0) == 0 || r.str.find("NOREPLICAS") != std::string::npos))
      throw lost(r.str);
  return out;
}

// Up to n more bytes into [dst, dst + n), from what is buffered first, then from the socket.
size_t RedisConnection::read_some(char* dst, size_t n) {
  if (in_pos_ < in_end_) {
    const size_t k = std::min(n, in_end_ - in_pos_);
    std::memcpy(dst, in_.data() + in_pos_, k);
    in_pos_ += k;
    return k;
  }
  for (;;) {
    const ssize_t got = ::read(ctx_->fd, dst, n);
    if (got > 0) return size_t(got);
    if (got == 0) throw StoreUnavailable("the server closed the connection");
    if (errno == EINTR) continue;
    throw StoreUnavailable(errno == EAGAIN || errno == EWOULDBLOCK ? "timed out"
                                                                   : std::strerror(errno));
  }
}

// One CRLF-terminated line (without it), refilling the buffer from the socket as needed.
std::string_view RedisConnection::read_line() {
  for (;;) {
    const char* b = in_.data() + in_pos_;
    if (const void* cr = std::memchr(b, '\r', in_end_ - in_pos_);
        cr && static_cast<const char*>(cr) + 1 < in_.data() + in_end_) {
      const size_t len = size_t(static_cast<const char*>(cr) - b);
      in_pos_ += len + 2;
      return {b, len};
    }
    if (in_pos_ > 0) {  // keep the partial line at the front
      std::memmove(in_.data(), b, in_end_ - in_pos_);
      in_end_ -= in_pos_;
      in_pos_ = 0;
    }
    if (in_.size() < (size_t(1) << 20)) in_.resize(size_t(1) << 20);
    if (in_end_ == in_.size()) throw StoreUnavailable("protocol error: a reply line too long");
    const size_t saved = in_end_;
    in_pos_ = in_end_;  // empty, so read_some goes to the socket
    const size_t got = read_some(in_.data() + saved, in_.size() - saved);
    in_pos_ = 0;
    in_end_ = saved + got;
  }
}

RedisReply RedisConnection::read_reply(int depth, BulkArena* arena) {
  if (depth > 8) throw StoreUnavailable("protocol error: replies nested too deep");
  const std::string_view line = read_line();
  if (line.empty()) throw StoreUnavailable("protocol error: an empty reply line");
  const std::string_view rest = line.substr(1);
  const auto number = [&] {
    long long v = 0;
    const bool neg = !rest.empty() && rest[0] == '-';
    const std::string_view digits = neg ? rest.substr(1) : rest;
    if (digits.empty() || digits.size() > 18 ||
        digits.find_first_not_of("0123456789") != std::string_view::npos)
      throw StoreUnavailable("protocol error: a bad length or integer");
    for (char c : digits) v = v * 10 + (c - '0');
    return neg ? -v : v;
  };
  RedisReply r;
  switch (line[0]) {
    case '+':
      r.type = RedisReply::Type::Status;
      r.str.assign(rest);
      break;
    case '-':
      r.type = RedisReply::Type::Error;
      r.str.assign(rest);
      break;
    case ':':
      r.type = RedisReply::Type::Integer;
      r.integer = number();
      break;
    case '$': {
      const long long n = number();
      if (n < 0) break;  // nil
      // Redis never sends more than its proto-max-bulk-len (512 MiB by default): a larger length
      // is a stream out of step, never an allocation to attempt.
      if (n > (1LL << 32)) throw StoreUnavailable("protocol error: a bulk string too long");
      r.type = RedisReply::Type::String;
      const size_t len = size_t(n) + 2;  // with its CRLF
      char* dst = nullptr;
      if (arena && len >= (size_t(64) << 10)) {
        dst = arena->allocate(len, &r.owner);
      } else {
        r.str.resize(len);
        dst = r.str.data();
      }
      for (size_t at = 0; at < len;) at += read_some(dst + at, len - at);
      if (dst[n] != '\r' || dst[n + 1] != '\n')
        throw StoreUnavailable("protocol error: a bulk string without its CRLF");
      if (r.owner)
        r.bulk = std::string_view(dst, size_t(n));
      else
        r.str.resize(size_t(n));
      bytes_in_ += size_t(n);
      break;
    }
    case '*': {
      const long long n = number();
      if (n < 0) break;  // nil
      if (n > (1LL << 24)) throw StoreUnavailable("protocol error: an array too long");
      r.type = RedisReply::Type::Array;
      r.elements.reserve(size_t(std::min(n, 1LL << 16)));
      for (long long i = 0; i < n; ++i) r.elements.push_back(read_reply(depth + 1, arena));
      break;
    }
    default:
      throw StoreUnavailable("protocol error: an unknown reply type");
  }
  return r;
}

RedisReply RedisConnection::command(const RedisArgs& args) {
  return std::move(pipeline({args})[0]);
}

RedisPool::RedisPool(RedisUrl url, RedisPoolOptions options, Log log, Observe observe)
    : url_(std::move(url)),
      options_(options),
      log_(log ? std::move(log) : [](const std::string&) {}),
      observe_(std::move(observe)) {}

RedisPool::~RedisPool() = default;

std::unique_ptr<RedisConnection> RedisPool::take(bool* reused) {
  std::lock_guard<std::mutex> lock(mu_);
  *reused = !idle_.empty();
  if (!idle_.empty()) {
    auto c = std::move(idle_.back());
    idle_.pop_back();
    c->reset_counters();
    return c;
  }
  return std::make_unique<RedisConnection>(url_, options_.timeout);
}

void RedisPool::give_back(std::unique_ptr<RedisConnection> c) {
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() < options_.idle_connections) idle_.push_back(std::move(c));
}

void RedisPool::failed(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.clear();  // their sockets are as dead as this one's
  backoff_ =
      backoff_.count() == 0 ? options_.backoff_min : std::min(options_.backoff_max, backoff_ * 2);
  retry_at_ = std::chrono::steady_clock::now() + backoff_;
  // One line when the store goes away, not one per call or per retry.
  if (!down_.exchange(true))
    log_("warning: store " + url_.shown + " unreachable (" + why +
         "): /v1/fak/ session calls answer 503 until it is back, completions run on local "
         "memory; retrying with backoff");
}

void RedisPool::succeeded() {
  if (!down_.load()) return;
  std::lock_guard<std::mutex> lock(mu_);
  backoff_ = std::chrono::milliseconds(0);
  if (down_.exchange(false)) {
    ++recoveries_;
    log_("store " + url_.shown + " reachable again");
  }
}

bool RedisPool::run(const std::function<void(RedisConnection&)>& fn, bool force) {
  if (down_.load() && !force) {
    std::lock_guard<std::mutex> lock(mu_);
    if (std::chrono::steady_clock::now() < retry_at_) return false;
    // This call is the retry; the others keep skipping until it is done.
    retry_at_ = std::chrono::steady_clock::now() + backoff_;
  }
  // note: a connection kept idle may have died with a Redis that restarted or failed over since;
  // its failure says nothing of the store now, so the call is tried once more on a new one.
  for (int attempt = 0;; ++attempt) {
    bool reused = false;
    auto c = take(&reused);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      fn(*c);
    } catch (const StoreUnavailable& e) {
      if (observe_)
        observe_(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                 c->bytes_out(), c->bytes_in(), true);
      if (reused && attempt == 0) {
        std::lock_guard<std::mutex> lock(mu_);
        idle_.clear();  // they are as old as this one
        continue;
      }
      failed(e.what());
      return false;
    }
    if (observe_)
      observe_(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
               c->bytes_out(), c->bytes_in(), false);
    give_back(std::move(c));
    succeeded();
    return true;
  }
}

}  // namespace fak::store
