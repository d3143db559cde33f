#include "store/redis_client.h"

#include <hiredis.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

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

RedisReply convert(const redisReply* r, size_t* bytes) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::Integer;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::String;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::Status;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = RedisReply::Type::Error;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::Array;
      for (size_t i = 0; i < r->elements; ++i)
        out.elements.push_back(convert(r->element[i], bytes));
      break;
    default:
      out.type = RedisReply::Type::Nil;
  }
  *bytes += out.str.size();
  return out;
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
  if (s.rfind("redis://", 0) != 0)
    fail(flag + ": '" + url.substr(0, 64) +
         "' is not a redis://[user:password@]host:port[/db] URL");
  s.remove_prefix(8);
  const std::string bad =
      flag + ": '" + url.substr(0, 64) + "' is not a redis://[user:password@]host:port[/db] URL";
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
  if (hostport.empty()) fail(bad);
  if (hostport.front() == '[') {  // [::1]:6379
    const size_t close = hostport.find(']');
    if (close == std::string_view::npos) fail(bad);
    u.host = std::string(hostport.substr(1, close - 1));
    hostport.remove_prefix(close + 1);
    if (!hostport.empty()) {
      if (hostport.front() != ':') fail(bad);
      u.port = parse_int(hostport.substr(1), 1, 65535, flag + ": the port must be 1-65535");
    }
  } else if (const size_t colon = hostport.rfind(':'); colon != std::string_view::npos) {
    u.host = std::string(hostport.substr(0, colon));
    u.port = parse_int(hostport.substr(colon + 1), 1, 65535, flag + ": the port must be 1-65535");
  } else {
    u.host = std::string(hostport);
  }
  if (u.host.empty()) fail(bad);
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
  u.shown = "redis://" + (u.user.empty() && u.password.empty() ? "" : u.user + ":***@") +
            (u.host.find(':') != std::string::npos ? "[" + u.host + "]" : u.host) + ":" +
            std::to_string(u.port) + (u.db ? "/" + std::to_string(u.db) : "");
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

void RedisConnection::connect() {
  ctx_ = redisConnectWithTimeout(url_.host.c_str(), url_.port, to_timeval(timeout_));
  if (!ctx_ || ctx_->err) {
    const std::string why = ctx_ ? ctx_->errstr : "out of memory";
    close();
    throw StoreUnavailable("cannot connect to " + url_.shown + ": " + why);
  }
  redisSetTimeout(ctx_, to_timeval(timeout_));
  redisEnableKeepAlive(ctx_);
  ctx_->reader->maxbuf = 0;  // keep the reader's buffer between replies of a MiB each
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

std::vector<RedisReply> RedisConnection::pipeline(const std::vector<RedisArgs>& commands) {
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
  // note: replies are read here in large pieces and fed to hiredis's parser, not through
  // redisGetReply, which reads 16 KiB at a time: a KV block is a MiB or more, and those small
  // reads (with the copies behind them) halved what a resume could read from the store.
  std::vector<RedisReply> out;
  out.reserve(commands.size());
  while (out.size() < commands.size()) {
    void* raw = nullptr;
    if (redisReaderGetReply(ctx_->reader, &raw) != REDIS_OK)
      throw lost(std::string("protocol error: ") + ctx_->reader->errstr);
    if (raw) {
      auto* r = static_cast<redisReply*>(raw);
      out.push_back(convert(r, &bytes_in_));
      freeReplyObject(r);
      continue;
    }
    read_buf_.resize(size_t(1) << 20);
    const ssize_t n = ::read(ctx_->fd, read_buf_.data(), read_buf_.size());
    if (n == 0) throw lost("the server closed the connection");
    if (n < 0) {
      if (errno == EINTR) continue;
      throw lost(errno == EAGAIN || errno == EWOULDBLOCK ? "timed out" : std::strerror(errno));
    }
    if (redisReaderFeed(ctx_->reader, read_buf_.data(), size_t(n)) != REDIS_OK)
      throw lost("out of memory reading a reply");
  }
  return out;
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

std::unique_ptr<RedisConnection> RedisPool::take() {
  std::lock_guard<std::mutex> lock(mu_);
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
         "): serving from local memory, retrying with backoff");
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
  auto c = take();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    fn(*c);
  } catch (const StoreUnavailable& e) {
    if (observe_)
      observe_(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
               c->bytes_out(), c->bytes_in(), true);
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

}  // namespace fak::store
