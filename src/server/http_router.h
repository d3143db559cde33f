// Routes a request to its handler by method and path pattern, and wraps every request with the
// hooks the application sets: `before` (authentication; may answer instead of the route), `after`
// (metrics, the request log) and `error` (the body of a refusal). The transport calls dispatch();
// statuses it produces itself (413, 431, 503 ...) get their bodies from refusal().
#pragma once

#include <string>
#include <vector>

#include "server/http_message.h"

namespace fak::server {

class Router {
 public:
  // pattern: a path whose segments are literal or ":name" (any one non-empty segment); the
  // matched ":name" segments land in HttpRequest::matches[1...]. note: not std::regex, whose
  // recursive matcher can overflow the stack on a long path. Inline routes run on the transport's
  // I/O thread and must never block (health checks stay answerable however busy the workers are).
  void add(std::string method, const std::string& pattern, HttpHandler handler,
           bool runs_inline = false);

  // Whether the route for this request runs inline (false for unknown routes too).
  bool runs_inline(const HttpRequest& req) const;

  // before -> the route (or 404 / 405) -> after. Never throws: what a handler throws past its
  // own guard becomes a 500.
  void dispatch(HttpRequest& req, HttpResponse& res) const;

  // A response for a status the transport decided on itself, through the error hook.
  HttpResponse refusal(const std::string& path, int status, const std::string& message,
                       const std::string& code) const;
  // The after hook for such a refusal (the transport calls it once it is sent).
  void note(const HttpRequest& req, int status) const {
    if (after) after(req, status);
  }

  // Returns true when it answered the request itself (e.g. 401).
  std::function<bool(const HttpRequest&, HttpResponse&)> before;
  std::function<void(const HttpRequest&, int status)> after;
  // Words a refusal the router or the transport makes (404, 413, 503, ...) in the API's shape;
  // `path` is the request's (empty when the head could not be read).
  std::function<void(const std::string& path, HttpResponse&, int status, const std::string& message,
                     const std::string& code)>
      error;

 private:
  void dispatch_method(HttpRequest& req, HttpResponse& res) const;
  struct Route {
    std::string method;
    std::vector<std::string> segments;
    HttpHandler handler;
    bool runs_inline;
  };
  const Route* find(const HttpRequest& req, std::vector<std::string>* groups,
                    bool* path_known) const;
  std::vector<Route> routes_;
};

}  // namespace fak::server
