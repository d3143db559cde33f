// A small HTTP client for the end-to-end server tests: JSON posts and gets with any headers, and
// streams read whole and split into named server-sent events, comments kept apart so tests can see
// keep-alives.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/json.h"

namespace fak::test {

using ojson = fak::ojson;

struct HttpReply {
  int status = 0;
  std::string body;
  ojson j() const { return ojson::parse(body); }
};

using Headers = std::vector<std::pair<std::string, std::string>>;

inline Headers bearer(const std::string& key) {
  return {{"Authorization", "Bearer " + key}};
}

inline HttpReply post_json(int port, const std::string& path, const std::string& body,
                           const Headers& headers = bearer("key-a")) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  httplib::Headers h;
  for (const auto& [k, v] : headers) h.emplace(k, v);
  auto r = c.Post(path.c_str(), h, body, "application/json");
  if (!r) return {0, "connection failed"};
  return {r->status, r->body};
}

inline HttpReply post_json(int port, const std::string& path, const ojson& body,
                           const Headers& headers = bearer("key-a")) {
  return post_json(port, path, body.dump(), headers);
}

inline HttpReply get_json(int port, const std::string& path,
                          const Headers& headers = bearer("key-a")) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  httplib::Headers h;
  for (const auto& [k, v] : headers) h.emplace(k, v);
  auto r = c.Get(path.c_str(), h);
  if (!r) return {0, "connection failed"};
  return {r->status, r->body};
}

// The raw bytes of a streamed reply.
inline std::string post_stream(int port, const std::string& path, const ojson& body,
                               const Headers& headers = bearer("key-a")) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  std::string raw;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  for (const auto& [k, v] : headers) req.set_header(k, v);
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    raw.append(d, n);
    return true;
  };
  c.send(req);
  return raw;
}

// A streamed completion of max_tokens tokens (ignore_eos) on the bundled model that holds a batch
// slot: the constructor returns once its first bytes arrived (or it failed); join() waits for its
// end, stop() cuts it off (so does the destructor).
class LongStream {
 public:
  LongStream(int port, int max_tokens) : client_("127.0.0.1", port) {
    client_.set_read_timeout(120, 0);
    thread_ = std::thread([this, max_tokens] {
      httplib::Request r;
      r.method = "POST";
      r.path = "/v1/completions";
      r.body = ojson{
          {"model", "pycoder-6m"},
          {"prompt", "def f():"},
          {"max_tokens", max_tokens},
          {"ignore_eos", true},
          {"stream",
           true}}.dump();
      r.set_header("Authorization", "Bearer key-a");
      r.content_receiver = [this](const char*, size_t, uint64_t, uint64_t) {
        started_ = true;
        return true;
      };
      client_.send(r);
      ended_ = true;
    });
    while (!started_ && !ended_) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ~LongStream() { stop(); }
  LongStream(const LongStream&) = delete;
  LongStream& operator=(const LongStream&) = delete;

  bool started() const { return started_; }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  void stop() {
    client_.stop();
    join();
  }

 private:
  httplib::Client client_;
  std::atomic<bool> started_{false}, ended_{false};
  std::thread thread_;
};

struct SseEvent {
  std::string name;  // the `event:` line; empty for a comment
  ojson data;        // parsed `data:`; null for a comment
  std::string comment;
};

// Splits a stream into its events ("event: NAME\ndata: JSON\n\n") and comments (": text\n\n").
inline std::vector<SseEvent> sse_events(const std::string& raw) {
  std::vector<SseEvent> out;
  size_t at = 0;
  while (at < raw.size()) {
    size_t end = raw.find("\n\n", at);
    if (end == std::string::npos) end = raw.size();
    const std::string chunk = raw.substr(at, end - at);
    at = end + 2;
    if (chunk.empty()) continue;
    SseEvent e;
    size_t line_at = 0;
    while (line_at < chunk.size()) {
      size_t line_end = chunk.find('\n', line_at);
      if (line_end == std::string::npos) line_end = chunk.size();
      const std::string line = chunk.substr(line_at, line_end - line_at);
      line_at = line_end + 1;
      if (line.rfind("event: ", 0) == 0)
        e.name = line.substr(7);
      else if (line.rfind("data: ", 0) == 0)
        e.data = ojson::parse(line.substr(6));
      else if (line.rfind(":", 0) == 0)
        e.comment = line.substr(1);
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace fak::test
