// The event-driven HTTP/1.1 transport (Boost.Beast over Asio). Over 600 lines on purpose: the
// connection's states (read, handler, write, streamed chunks, keep-alive, abusive-client limits)
// are one state machine, clearer in one file than split across several.
#include "server/http_server.h"

#include <sys/resource.h>

#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <list>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "server/worker_pool.h"

namespace fak::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

using Parser = http::request_parser<http::string_body>;

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(int64_t(seconds * 1000));
}

// What the transport answers itself, before any route sees the request.
struct Refusal {
  int status;
  std::string message, code;
};

Refusal refusal_for(const beast::error_code& ec, const HttpServerOptions& o) {
  if (ec == http::error::header_limit)
    return {431,
            "the request head is larger than the server accepts (" +
                std::to_string(o.max_header_bytes) + " bytes)",
            "header_too_large"};
  if (ec == http::error::body_limit)
    return {413,
            "the request body is larger than the server accepts (--max-body, " +
                std::to_string(o.max_body_bytes) + " bytes)",
            "body_too_large"};
  return {400, "malformed HTTP request: " + ec.message(), "bad_http"};
}

// A request that may carry a body must say how long it is (or send it chunked).
std::optional<Refusal> check_head(const Parser& p) {
  const http::verb m = p.get().method();
  if ((m == http::verb::post || m == http::verb::put || m == http::verb::patch) &&
      !p.content_length() && !p.chunked())
    return Refusal{411,
                   "a " + std::string(p.get().method_string()) +
                       " request needs a Content-Length header (or a chunked body)",
                   "length_required"};
  return std::nullopt;
}

bool is_disconnect(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == http::error::partial_message ||
         ec == beast::error::timeout || ec == asio::error::operation_aborted ||
         ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == asio::error::bad_descriptor;
}

HttpRequest to_request(http::request<http::string_body>&& m) {
  HttpRequest r;
  r.method = std::string(m.method_string());
  const std::string target(m.target());
  const size_t q = target.find('?');
  r.path = target.substr(0, q);
  if (q != std::string::npos) r.query = target.substr(q + 1);
  for (const auto& f : m)
    r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  r.body = std::move(m.body());
  return r;
}

http::response<http::string_body> to_message(HttpResponse&& res, unsigned version,
                                             bool keep_alive) {
  http::response<http::string_body> m{http::status(res.status), version};
  m.set(http::field::server, "fak");
  m.set(http::field::content_type, res.content_type);
  for (auto& [k, v] : res.headers) m.insert(k, v);
  m.keep_alive(keep_alive);
  if (res.head_only) {
    // The length the GET's body has, and no body: Beast writes what body() holds.
    m.content_length(res.body.size());
    return m;
  }
  m.body() = std::move(res.body);
  m.prepare_payload();
  return m;
}

// A stream's head: chunked on HTTP/1.1; an HTTP/1.0 client reads until the connection closes.
std::string stream_head(const HttpResponse& res, bool chunked, bool keep_alive) {
  std::string h = "HTTP/1.1 " + std::to_string(res.status) + " " +
                  std::string(http::obsolete_reason(http::status(res.status))) +
                  "\r\nServer: fak\r\nContent-Type: " + res.content_type + "\r\n";
  for (const auto& [k, v] : res.headers) h += k + ": " + v + "\r\n";
  if (chunked) h += "Transfer-Encoding: chunked\r\n";
  if (!keep_alive || !chunked) h += "Connection: close\r\n";
  return h + "\r\n";
}

std::string chunk(const std::string& data) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return size + data + "\r\n";
}

constexpr const char* kLastChunk = "0\r\n\r\n";

// Worker thread <- I/O thread: the outcome of one write.
class WriteWaiter {
 public:
  void set(bool ok) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      ok_ = ok;
    }
    cv_.notify_one();
  }
  bool wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return ok_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false, ok_ = false;
};

class Connection;

}  // namespace

struct HttpServer::Impl {
  Impl(const Router& r, HttpServerOptions opts) : router(r), o(std::move(opts)) {}

  const Router& router;
  HttpServerOptions o;
  asio::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  std::optional<asio::steady_timer> accept_retry;
  std::unique_ptr<WorkerPool> workers;
  std::list<Connection*> open;  // I/O thread only
  bool stopping = false;        // I/O thread only

  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stop_requested = false;

  void accept();
  void admit(tcp::socket socket);
};

namespace {

// One client connection. Everything but work() and drive_stream() runs on the I/O thread; those
// two run on a worker and talk to the I/O thread only through asio::post.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  enum class Phase { Head, Body, Busy };

  Connection(HttpServer::Impl& srv, tcp::socket socket)
      : srv_(srv), stream_(std::move(socket)), buffer_(srv.o.max_header_bytes + (16 << 10)) {}
  ~Connection() { unlist(); }

  void start() {
    srv_.open.push_back(this);
    listed_ = std::prev(srv_.open.end());
    is_listed_ = true;
    beast::error_code ec;
    const auto peer = stream_.socket().remote_endpoint(ec);
    if (!ec) remote_ = peer.address().to_string();
    read_head();
  }

  Phase phase() const { return phase_; }
  Clock::time_point since() const { return since_; }

  void close() {
    if (closed_) return;
    closed_ = true;
    gone_->store(true);
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
    unlist();
  }

 private:
  void unlist() {
    if (is_listed_) srv_.open.erase(listed_);
    is_listed_ = false;
  }

  void read_head() {
    if (closed_) return;
    phase_ = Phase::Head;
    since_ = Clock::now();
    parser_.emplace();
    parser_->header_limit(uint32_t(srv_.o.max_header_bytes));
    parser_->body_limit(uint64_t(srv_.o.max_body_bytes));
    stream_.expires_after(millis(srv_.o.header_timeout_s));
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_head(ec); });
  }

  void on_head(beast::error_code ec) {
    if (closed_) return;
    if (ec) {
      if (is_disconnect(ec)) return close();
      return refuse(refusal_for(ec, srv_.o));
    }
    if (auto r = check_head(*parser_)) return refuse(*r);
    keep_alive_ = parser_->get().keep_alive();
    version_ = parser_->get().version();
    const auto expect = parser_->get()[http::field::expect];
    if (!parser_->is_done() && beast::iequals(expect, "100-continue")) {
      // curl and others wait for this before sending a large body.
      auto text = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      stream_.expires_after(millis(srv_.o.write_timeout_s));
      asio::async_write(stream_, asio::buffer(*text),
                        [self = shared_from_this(), text](beast::error_code e, size_t) {
                          if (e) return self->close();
                          self->read_body();
                        });
      return;
    }
    read_body();
  }

  void read_body() {
    if (closed_) return;
    phase_ = Phase::Body;
    since_ = Clock::now();
    if (parser_->is_done()) return on_request();
    stream_.expires_after(millis(srv_.o.body_timeout_s));
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (self->closed_) return;
                       if (ec) {
                         if (is_disconnect(ec)) return self->close();
                         return self->refuse(refusal_for(ec, self->srv_.o));
                       }
                       self->on_request();
                     });
  }

  void on_request() {
    phase_ = Phase::Busy;
    stream_.expires_never();
    auto req = std::make_shared<HttpRequest>(to_request(parser_->release()));
    parser_.reset();
    req->remote = remote_;
    req->gone = gone_;
    response_done_ = false;
    std::optional<HttpResponse> inline_stream;
    if (srv_.router.runs_inline(*req)) {
      HttpResponse res;
      srv_.router.dispatch(*req, res);
      if (!res.stream) return write_response(std::move(res));
      inline_stream.emplace(std::move(res));  // its stream still needs a worker to drive it
    }
    start_probe();
    auto self = shared_from_this();
    auto task = [self, req, inline_stream = std::move(inline_stream)]() mutable {
      if (inline_stream) return drive_stream(std::move(self), std::move(*inline_stream));
      work(std::move(self), std::move(req));
    };
    if (!srv_.workers->try_post(std::move(task))) {
      HttpResponse res = srv_.router.refusal(req->path, 503,
                                             "the server is overloaded: every worker is busy and " +
                                                 std::to_string(srv_.o.max_pending) +
                                                 " requests wait for one; retry later",
                                             "overloaded");
      res.set_header("Retry-After", "1");
      srv_.router.note(*req, 503);
      keep_alive_ = false;
      write_response(std::move(res));
    }
  }

  // While a request is handled nothing should come from the client: a read that ends means it
  // left (its generation is then cancelled); bytes that arrive are its next request, kept.
  void start_probe() {
    if (buffer_.size() > 0) return;  // a pipelined request is already here
    probe_pending_ = true;
    stream_.async_read_some(
        buffer_.prepare(4096),
        [self = shared_from_this()](beast::error_code ec, size_t n) { self->on_probe(ec, n); });
  }

  void on_probe(beast::error_code ec, size_t n) {
    probe_pending_ = false;
    if (!ec && n > 0)
      buffer_.commit(n);
    else if (ec != asio::error::operation_aborted)
      gone_->store(true);
    if (response_done_) next_request();
  }

  // Worker thread: run the route, then hand the response to the I/O thread or drive the stream.
  static void work(std::shared_ptr<Connection> self, std::shared_ptr<HttpRequest> req) {
    HttpResponse res;
    self->srv_.router.dispatch(*req, res);
    if (res.stream) return drive_stream(std::move(self), std::move(res));
    auto& ioc = self->srv_.ioc;
    asio::post(ioc, [self = std::move(self), res = std::move(res)]() mutable {
      self->write_response(std::move(res));
    });
  }

  static void drive_stream(std::shared_ptr<Connection> self, HttpResponse res) {
    const bool chunked = self->version_ >= 11;
    const bool keep_alive = self->keep_alive_ && chunked;
    bool ok = self->write_blocking(stream_head(res, chunked, keep_alive));
    std::string out;
    for (bool more = true; ok && more;) {
      out.clear();
      try {
        more = res.stream->next(out);
      } catch (...) {
        ok = false;
        break;
      }
      if (!out.empty()) ok = self->write_blocking(chunked ? chunk(out) : out);
      if (self->gone_->load()) ok = false;
    }
    if (ok && chunked) ok = self->write_blocking(kLastChunk);
    if (res.stream->done) res.stream->done(ok);
    auto& ioc = self->srv_.ioc;
    asio::post(ioc, [self = std::move(self), ok, keep_alive] {
      if (!ok || !keep_alive) return self->close();
      self->on_response_written({});
    });
  }

  // Worker thread: one write through the I/O thread, waited for.
  bool write_blocking(std::string bytes) {
    auto waiter = std::make_shared<WriteWaiter>();
    auto data = std::make_shared<std::string>(std::move(bytes));
    asio::post(srv_.ioc, [self = shared_from_this(), data, waiter] {
      if (self->closed_) return waiter->set(false);
      self->stream_.expires_after(millis(self->srv_.o.write_timeout_s));
      asio::async_write(self->stream_, asio::buffer(*data),
                        [self, data, waiter](beast::error_code ec, size_t) { waiter->set(!ec); });
    });
    return waiter->wait();
  }

  void write_response(HttpResponse res) {
    if (closed_) return;
    phase_ = Phase::Busy;
    auto msg = std::make_shared<http::response<http::string_body>>(
        to_message(std::move(res), version_, keep_alive_ && !srv_.stopping));
    stream_.expires_after(millis(srv_.o.write_timeout_s));
    http::async_write(stream_, *msg,
                      [self = shared_from_this(), msg](beast::error_code ec, size_t) {
                        self->on_response_written(ec);
                      });
  }

  void on_response_written(beast::error_code ec) {
    if (closed_) return;
    if (!ec && lingering_) return linger();
    if (ec || !keep_alive_ || srv_.stopping) return close();
    response_done_ = true;
    if (probe_pending_) {
      // The probe's handler carries on (with any bytes it read) once cancelled.
      beast::error_code ignored;
      stream_.socket().cancel(ignored);
      return;
    }
    next_request();
  }

  void next_request() {
    if (closed_) return;
    if (gone_->load()) return close();
    read_head();
  }

  // After a refusal the client may still be sending (a body we will not read): closing at once
  // would reset the connection, and most clients write their whole body before they read, so they
  // would never see the refusal. So, as nginx's lingering close does, stop sending, read and drop
  // what comes for a bounded time and amount, then close.
  void linger() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(std::chrono::seconds(5));
    drain(size_t(64) << 20);
  }

  void drain(size_t budget) {
    auto sink = std::make_shared<std::array<char, 16384>>();
    stream_.async_read_some(asio::buffer(*sink), [self = shared_from_this(), sink, budget](
                                                     beast::error_code ec, size_t n) {
      if (ec || n >= budget) return self->close();
      self->drain(budget - n);
    });
  }

  // Answers with an error status and closes: after a refusal the rest of the stream cannot be
  // trusted to be a request boundary.
  void refuse(const Refusal& r) {
    HttpRequest req;
    if (parser_) {
      // The parser stores the start line as soon as it has read it, so a refusal found among the
      // fields (a Content-Length past the limit) still knows its path (empty before that).
      req.method = std::string(parser_->get().method_string());
      req.path = std::string(parser_->get().target());
    }
    srv_.router.note(req, r.status);
    keep_alive_ = false;
    lingering_ = true;
    write_response(srv_.router.refusal(req.path, r.status, r.message, r.code));
  }

  HttpServer::Impl& srv_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<Parser> parser_;
  std::shared_ptr<std::atomic<bool>> gone_ = std::make_shared<std::atomic<bool>>(false);
  std::string remote_;
  Phase phase_ = Phase::Head;
  Clock::time_point since_ = Clock::now();
  std::list<Connection*>::iterator listed_;
  bool is_listed_ = false;
  bool closed_ = false;
  bool keep_alive_ = false;
  unsigned version_ = 11;
  bool probe_pending_ = false, response_done_ = false;
  bool lingering_ = false;
};

// Room for the connections within the process's file limit (raised to its hard maximum first).
int connections_that_fit(int wanted, int workers) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return wanted;
  if (lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 1 << 20);
    setrlimit(RLIMIT_NOFILE, &lim);
    getrlimit(RLIMIT_NOFILE, &lim);
  }
  // Model and session files, the listening socket, stdio: a margin beyond the workers' own.
  const int64_t room = int64_t(lim.rlim_cur) - 128 - workers;
  return int(std::max<int64_t>(16, std::min<int64_t>(wanted, room)));
}

}  // namespace

void HttpServer::Impl::accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (stopping) return;
    if (!ec) {
      admit(std::move(socket));
      return accept();
    }
    if (ec == asio::error::operation_aborted) return;
    // Out of descriptors (or a transient error): free the stalest waiting connection and retry
    // shortly rather than spin.
    for (Connection* c : open)
      if (c->phase() == Connection::Phase::Head) {
        c->close();
        break;
      }
    accept_retry.emplace(ioc, std::chrono::milliseconds(50));
    accept_retry->async_wait([this](beast::error_code e) {
      if (!e && !stopping) accept();
    });
  });
}

void HttpServer::Impl::admit(tcp::socket socket) {
  if (int(open.size()) >= o.max_connections) {
    Connection* stalest = nullptr;
    for (Connection* c : open)
      if (c->phase() == Connection::Phase::Head && (!stalest || c->since() < stalest->since()))
        stalest = c;
    if (!stalest) {
      // Every connection is working: refuse this one without spending more on it.
      static const std::string kBody =
          R"({"error": {"message": "too many connections", "type": "server_error", )"
          R"("param": null, "code": "too_many_connections"}})";
      static const std::string kBusy =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: "
          "1\r\nConnection: close\r\nContent-Length: " +
          std::to_string(kBody.size()) + "\r\n\r\n" + kBody;
      beast::error_code ec;
      socket.non_blocking(true, ec);
      socket.write_some(asio::buffer(kBusy), ec);
      socket.close(ec);
      return;
    }
    stalest->close();
  }
  beast::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
  std::make_shared<Connection>(*this, std::move(socket))->start();
}

HttpServer::HttpServer(const Router& router, HttpServerOptions options)
    : impl_(std::make_unique<Impl>(router, std::move(options))) {
  Impl& m = *impl_;
  m.o.max_connections = connections_that_fit(m.o.max_connections, m.o.workers);
  m.workers = std::make_unique<WorkerPool>(m.o.workers, m.o.max_pending);
}

HttpServer::~HttpServer() {
  stop();
  impl_->workers->stop();
}

int HttpServer::listen() {
  Impl& m = *impl_;
  const std::string where = m.o.host + ":" + std::to_string(m.o.port);
  beast::error_code ec;
  tcp::resolver resolver(m.ioc);
  const auto found = resolver.resolve(m.o.host, std::to_string(m.o.port),
                                      tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || found.empty()) fail("cannot listen on " + where + ": " + ec.message());
  const tcp::endpoint ep = found.begin()->endpoint();
  m.acceptor.open(ep.protocol(), ec);
  if (!ec) m.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) m.acceptor.bind(ep, ec);
  if (!ec) m.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    fail("cannot listen on " + where +
         " (in use, or not an address of this machine: " + ec.message() + ")");
  return m.acceptor.local_endpoint().port();
}

void HttpServer::run() {
  Impl& m = *impl_;
  auto guard = asio::make_work_guard(m.ioc);
  asio::post(m.ioc, [&m] { m.accept(); });
  std::thread io([&m] { m.ioc.run(); });
  {
    std::unique_lock<std::mutex> lock(m.stop_mu);
    m.stop_cv.wait(lock, [&] { return m.stop_requested; });
  }
  // Stop accepting and close every connection: handlers waiting on a client see it gone, writes
  // fail at once, so the workers finish; then the I/O thread runs out of work.
  asio::post(m.ioc, [&m] {
    m.stopping = true;
    beast::error_code ec;
    m.acceptor.close(ec);
    if (m.accept_retry) m.accept_retry->cancel();
    while (!m.open.empty()) m.open.front()->close();
  });
  m.workers->stop();
  guard.reset();
  io.join();
}

int HttpServer::busy() const {
  return impl_->workers->busy();
}

void HttpServer::stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->stop_mu);
    impl_->stop_requested = true;
  }
  impl_->stop_cv.notify_all();
}

std::string serve_raw_request(const Router& router, const HttpServerOptions& o,
                              std::string_view bytes) {
  Parser p;
  p.header_limit(uint32_t(o.max_header_bytes));
  p.body_limit(uint64_t(o.max_body_bytes));
  p.eager(true);
  beast::error_code ec;
  asio::const_buffer in(bytes.data(), bytes.size());
  while (!p.is_done() && in.size() > 0) {
    const size_t used = p.put(in, ec);
    in += used;
    if (ec == http::error::need_more) {
      ec = {};
      if (used == 0) break;  // an incomplete piece: the server would wait for more
      continue;
    }
    if (ec) break;
  }
  auto wire = [](HttpResponse&& res, unsigned version, bool keep_alive) {
    std::ostringstream os;
    os << to_message(std::move(res), version, keep_alive);
    return os.str();
  };
  const std::string path(p.get().target());  // stored once the start line is read
  if (ec) {
    const Refusal r = refusal_for(ec, o);
    return wire(router.refusal(path, r.status, r.message, r.code), 11, false);
  }
  if (!p.is_done()) return "";  // incomplete: a real client would time out, unanswered
  if (auto r = check_head(p))
    return wire(router.refusal(path, r->status, r->message, r->code), 11, false);
  const unsigned version = p.get().version();
  const bool keep_alive = p.get().keep_alive();
  HttpRequest req = to_request(p.release());
  req.gone = std::make_shared<std::atomic<bool>>(false);
  HttpResponse res;
  router.dispatch(req, res);
  if (!res.stream) return wire(std::move(res), version, keep_alive);
  const bool chunked = version >= 11;
  std::string out = stream_head(res, chunked, keep_alive), piece;
  bool ok = true;
  for (bool more = true; more;) {
    piece.clear();
    try {
      more = res.stream->next(piece);
    } catch (...) {
      ok = false;
      break;
    }
    if (!piece.empty()) out += chunked ? chunk(piece) : piece;
  }
  if (ok && chunked) out += kLastChunk;
  if (res.stream->done) res.stream->done(ok);
  return out;
}

}  // namespace fak::server
