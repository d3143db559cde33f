// HTTP requests and responses as the routes see them, free of any HTTP library: the transport
// (http_server.cpp) fills a request from the wire and writes the response back, so route files
// never compile the networking headers and can be driven in-process by tests and fuzzers.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fak::server {

struct HttpRequest {
  std::string method;                                        // "GET", "POST", ...
  std::string path;                                          // the target without its query string
  std::string query;                                         // after '?', undecoded; empty if none
  std::vector<std::pair<std::string, std::string>> headers;  // as received
  std::string body;
  std::vector<std::string> matches;  // the route pattern's groups; [0] is the whole path
  std::string remote;                // peer address, for the request log
  // Set by the transport when the client closes its end while the request is being handled: a
  // long generation it no longer waits for can be cancelled.
  std::shared_ptr<const std::atomic<bool>> gone;

  // The first header of that name (case-insensitive); empty when absent.
  std::string header(std::string_view name) const;
  bool client_gone() const { return gone && gone->load(std::memory_order_relaxed); }
};

// A body produced over time (server-sent events). The transport calls next() on a worker thread
// again and again; each call appends what is ready to `out` (it may wait briefly for it) and
// returns false once the stream is over, its last bytes in `out`. done(complete) runs exactly once
// at the end; complete is false when the client left, a write failed or next() threw.
struct HttpStream {
  std::function<bool(std::string& out)> next;
  std::function<void(bool complete)> done;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // besides the ones the transport sets
  std::optional<HttpStream> stream;  // set: sent with chunked transfer encoding as it is produced
  // The answer to a HEAD request: the GET's status and headers (Content-Length the GET body's
  // size), and no body (RFC 9110 9.3.2): a body here would be read as the start of the next
  // response on a kept-alive connection.
  bool head_only = false;

  void set_header(std::string name, std::string value) {
    headers.emplace_back(std::move(name), std::move(value));
  }
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponse&)>;

}  // namespace fak::server
