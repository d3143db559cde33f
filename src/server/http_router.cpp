#include "server/http_router.h"

#include <strings.h>

#include <exception>

namespace fak::server {

namespace {

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < path.size()) {
    if (path[at] == '/') {
      ++at;
      continue;
    }
    const size_t end = std::min(path.find('/', at), path.size());
    out.push_back(path.substr(at, end - at));
    at = end;
  }
  return out;
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k.size() == name.size() && strncasecmp(k.data(), name.data(), k.size()) == 0) return v;
  return "";
}

void Router::add(std::string method, const std::string& pattern, HttpHandler handler,
                 bool runs_inline) {
  routes_.push_back({std::move(method), split_path(pattern), std::move(handler), runs_inline});
}

const Router::Route* Router::find(const HttpRequest& req, std::vector<std::string>* groups,
                                  bool* path_known) const {
  // A trailing or doubled slash is not the same route: paths must match segment for segment.
  if (req.path.empty() || req.path[0] != '/' || req.path.find("//") != std::string::npos ||
      (req.path.size() > 1 && req.path.back() == '/')) {
    *path_known = false;
    return nullptr;
  }
  const std::vector<std::string> parts = split_path(req.path);
  *path_known = false;
  for (const Route& r : routes_) {
    if (r.segments.size() != parts.size()) continue;
    std::vector<std::string> found;
    bool ok = true;
    for (size_t i = 0; ok && i < parts.size(); ++i) {
      if (!r.segments[i].empty() && r.segments[i][0] == ':')
        found.push_back(parts[i]);
      else
        ok = r.segments[i] == parts[i];
    }
    if (!ok) continue;
    *path_known = true;
    if (r.method != req.method) continue;
    *groups = std::move(found);
    return &r;
  }
  return nullptr;
}

bool Router::runs_inline(const HttpRequest& req) const {
  std::vector<std::string> groups;
  bool known = false;
  HttpRequest as_get;
  const bool head = req.method == "HEAD";
  if (head) {
    as_get.method = "GET";
    as_get.path = req.path;
  }
  const Route* r = find(head ? as_get : req, &groups, &known);
  return r && r->runs_inline;
}

HttpResponse Router::refusal(const std::string& path, int status, const std::string& message,
                             const std::string& code) const {
  HttpResponse res;
  res.status = status;
  if (error) {
    error(path, res, status, message, code);
  } else {
    res.content_type = "text/plain";
    res.body = message + "\n";
  }
  return res;
}

void Router::dispatch(HttpRequest& req, HttpResponse& res) const {
  // HEAD is GET without the body (RFC 9110): the same route, the same status and headers.
  const bool head = req.method == "HEAD";
  if (head) req.method = "GET";
  dispatch_method(req, res);
  if (head) {
    req.method = "HEAD";
    if (res.stream) {
      if (res.stream->done) res.stream->done(false);
      res.stream.reset();
    }
    res.head_only = true;
  }
}

void Router::dispatch_method(HttpRequest& req, HttpResponse& res) const {
  try {
    if (!before || !before(req, res)) {
      std::vector<std::string> groups;
      bool known = false;
      const Route* r = find(req, &groups, &known);
      if (!r) {
        res = known ? refusal(req.path, 405,
                              "method " + req.method + " is not allowed on " + req.path,
                              "method_not_allowed")
                    : refusal(req.path, 404, "no route for " + req.method + " " + req.path,
                              "not_found");
      } else {
        req.matches.assign(1, req.path);
        req.matches.insert(req.matches.end(), groups.begin(), groups.end());
        r->handler(req, res);
      }
    }
  } catch (const std::exception& e) {
    res = refusal(req.path, 500, std::string("internal error: ") + e.what(), "");
  } catch (...) {
    res = refusal(req.path, 500, "internal error", "");
  }
  // A stream's status is known now; its completion is the transport's business.
  if (after) after(req, res.status);
}

}  // namespace fak::server
