// The calls the store's end-to-end tests make of replicas (server_store_test, server_store_faults_
// test, server_sentinel_test): JSON posts, gets and deletes under an API key, one call on several
// replicas with each status checked, a /metrics value, an error's code, and a call repeated while
// the store is recovering or unavailable.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/json.h"
#include "http_test_client.h"

namespace fak::test {

inline HttpReply post(int port, const std::string& path, const ojson& body,
                      const std::string& key = "key-a") {
  return post_json(port, path, body, bearer(key));
}

inline HttpReply get(int port, const std::string& path, const std::string& key = "key-a") {
  return get_json(port, path, bearer(key));
}

inline HttpReply http_delete(int port, const std::string& path, const std::string& key = "key-a") {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  auto r = c.Delete(path.c_str(), {{"Authorization", "Bearer " + key}});
  if (!r) return {0, "connection failed"};
  return {r->status, r->body};
}

// The error's code ("" when the body is not an error).
inline std::string code_of(const HttpReply& r) {
  try {
    return r.j()["error"]["code"].get<std::string>();
  } catch (...) {
    return "";
  }
}

// A counter or gauge from /metrics (-1 when absent).
inline double metric(int port, const std::string& name) {
  const std::string text = get(port, "/metrics").body;
  const size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::atof(text.c_str() + at + name.size() + 2);
}

// The same call on each port, each reply's status checked; returns the replies.
inline std::vector<HttpReply> on_each(const std::vector<int>& ports, const std::string& path,
                                      const ojson& body, int status = 200) {
  std::vector<HttpReply> out;
  for (int port : ports) {
    out.push_back(post(port, path, body));
    EXPECT_EQ(out.back().status, status) << port << " " << path << " -> " << out.back().body;
  }
  return out;
}

// The call again while `retry` says so of its reply, every 100 ms for at most `tries` times.
template <typename Call, typename Retry>
HttpReply until(Call call, Retry retry, int tries) {
  HttpReply r;
  for (int i = 0; i < tries; ++i) {
    r = call();
    if (!retry(r)) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return r;
}

}  // namespace fak::test
