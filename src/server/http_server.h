// The HTTP/1.1 transport of `fak serve`: an event-driven server (Boost.Beast over Asio, one I/O
// thread) that reads requests under deadlines and limits, hands complete ones to the router, and
// writes responses and streams back. What it guarantees against abusive clients:
//
// - A connection costs a socket and a few KiB while it reads: slow clients (slowloris) hold no
//   thread. The request head must arrive within header_timeout of the previous response (or the
//   accept), the body within body_timeout; a stalled connection is closed.
// - At most max_connections sockets are open; at the cap the connection that has waited longest
//   for its request head is dropped to admit the new one, so idle or trickling clients never lock
//   out working ones. With none to drop, the new connection gets a 503.
// - Bodies are bounded whatever their framing: a Content-Length over max_body_bytes is a 413
//   before any of the body is read, a chunked body is a 413 as soon as it passes the limit, and a
//   POST with neither is a 411. Heads over max_header_bytes are a 431.
// - Complete requests run on a bounded worker pool (handlers may block on the scheduler); more
//   than max_pending waiting for a worker are a 503. Inline routes (health, metrics) run on the
//   I/O thread and stay answerable when every worker is busy.
// - A client that closes its connection while its request runs is noticed (HttpRequest::gone),
//   so its generation is cancelled.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "server/http_router.h"

namespace fak::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0 = any free port
  size_t max_body_bytes = size_t(8) << 20;
  size_t max_header_bytes = size_t(64) << 10;
  int max_connections = 1024;  // lowered to fit the process's file limit
  int workers = 16;
  int max_pending = 256;  // complete requests waiting for a worker
  double header_timeout_s = 10;
  double body_timeout_s = 60;
  double write_timeout_s = 30;
};

class HttpServer {
 public:
  HttpServer(const Router& router, HttpServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens; returns the port. Throws fak::Error naming the address.
  int listen();
  // Serves until stop(); returns once every connection is closed and every worker has finished.
  void run();
  // From any thread.
  void stop();
  // Requests being handled or waiting for a worker, streams included (a drain waits for 0).
  int busy() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// In-process, without sockets: parses raw request bytes with the transport's own parser and
// limits, dispatches through the router on this thread (a stream is drained to its end) and
// returns the response as it would go on the wire. For the fuzzer and tests of the whole path.
std::string serve_raw_request(const Router& router, const HttpServerOptions& options,
                              std::string_view bytes);

}  // namespace fak::server
