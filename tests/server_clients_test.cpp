// What the coding-agent CLIs of today send to `fak serve` (issue 33): HEAD before every run
// (Claude Code), no output limit or a 32k one (Codex, Claude Code) against --max-tokens,
// logit_bias (evaluation harnesses), and Codex's /v1/responses tools: namespace tools and hosted
// tools fak cannot run.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "core/json.h"
#include "http_test_client.h"
#include "server_process.h"

namespace fak::test {
namespace {

using json = fak::ojson;

// Sends raw bytes on one connection, then reads until the server has sent `responses` whole
// responses or closes: the bytes as they came.
std::string exchange_raw(int port, const std::string& request, int seconds = 5) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return "";
  timeval tv{seconds, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  (void)!::write(fd, request.data(), request.size());
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
  ::close(fd);
  return out;
}

class ServerClients : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess("--parallel 2 --max-tokens 7"); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static int port() { return server_->port(); }
  static inline ServerProcess* server_ = nullptr;
};

HttpReply chat(int port, json body, httplib::Headers* headers_out = nullptr) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  auto r = c.Post("/v1/chat/completions", {{"Authorization", "Bearer key-a"}}, body.dump(),
                  "application/json");
  if (!r) return {0, "connection failed"};
  if (headers_out) *headers_out = r->headers;
  return {r->status, r->body};
}

json user(const std::string& text) {
  return json::array({{{"role", "user"}, {"content", text}}});
}

}  // namespace

// Issue 33, item 5: HEAD answers as GET does, without a body (RFC 9110): a kept-alive connection
// then reads the next response cleanly. Claude Code sends HEAD / before every run.
TEST_F(ServerClients, HeadAnswersLikeGetWithoutABody) {
  for (const char* path : {"/", "/health", "/v1/models"}) {
    const std::string get =
        exchange_raw(port(), std::string("GET ") + path +
                                 " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer key-a\r\n"
                                 "Connection: close\r\n\r\n");
    ASSERT_EQ(get.rfind("HTTP/1.1 200", 0), 0u) << path << ": " << get;
    const size_t body_at = get.find("\r\n\r\n") + 4;
    const size_t get_body = get.size() - body_at;
    ASSERT_GT(get_body, 0u);
    // HEAD, then GET /health on the same connection: two whole responses, nothing in between.
    const std::string both =
        exchange_raw(port(), std::string("HEAD ") + path +
                                 " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer key-a\r\n\r\n"
                                 "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    ASSERT_EQ(both.rfind("HTTP/1.1 200", 0), 0u) << path << ": " << both;
    const size_t head_end = both.find("\r\n\r\n");
    const std::string head = both.substr(0, head_end);
    EXPECT_NE(head.find("Content-Length: " + std::to_string(get_body)), std::string::npos) << head;
    EXPECT_EQ(both.compare(head_end + 4, 12, "HTTP/1.1 200"), 0)
        << "the HEAD response carried a body: " << both;
  }
  // A path nobody serves is 404 for HEAD as for GET, still without a body.
  const std::string missing =
      exchange_raw(port(),
                   "HEAD /nope HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer key-a\r\n"
                   "Connection: close\r\n\r\n");
  EXPECT_EQ(missing.rfind("HTTP/1.1 404", 0), 0u) << missing;
  EXPECT_EQ(missing.size(), missing.find("\r\n\r\n") + 4) << missing;
}

// Issue 33, item 6: --max-tokens is the default when the client names no limit and the ceiling
// when it asks for more; the reply says the server decided it.
TEST_F(ServerClients, MaxTokensIsTheDefaultAndTheCeiling) {
  const json base = {{"model", "pycoder-6m"},
                     {"temperature", 0},
                     {"ignore_eos", true},
                     {"messages", user("def f(x):")}};
  httplib::Headers h;
  const HttpReply none = chat(port(), base, &h);
  ASSERT_EQ(none.status, 200) << none.body;
  EXPECT_EQ(none.j()["usage"]["completion_tokens"], 7);
  EXPECT_EQ(none.j()["choices"][0]["finish_reason"], "length");
  ASSERT_TRUE(h.count("Fak-Max-Tokens"));
  EXPECT_EQ(h.find("Fak-Max-Tokens")->second, "7; source=server_default");
  json big = base;
  big["max_tokens"] = 32000;
  const HttpReply capped = chat(port(), big, &h);
  ASSERT_EQ(capped.status, 200) << capped.body;
  EXPECT_EQ(capped.j()["usage"]["completion_tokens"], 7);
  EXPECT_EQ(h.find("Fak-Max-Tokens")->second, "7; source=server_cap");
  json small = base;
  small["max_tokens"] = 3;
  const HttpReply asked = chat(port(), small, &h);
  EXPECT_EQ(asked.j()["usage"]["completion_tokens"], 3);
  EXPECT_FALSE(h.count("Fak-Max-Tokens")) << "the client's own limit is not the server's";
}

// Issue 33, item 7: logit_bias as OpenAI defines it: added to the logits, -100 bans a token,
// +100 makes it the choice; bad keys and values are refused by name.
TEST_F(ServerClients, LogitBiasBansAndForcesTokens) {
  const std::string prompt = "def add(a, b):\n";
  const auto complete = [&](json bias, int n) {
    json body = {{"model", "pycoder-6m"},
                 {"temperature", 0},
                 {"max_tokens", n},
                 {"ignore_eos", true},
                 {"prompt", prompt}};
    if (!bias.is_null()) body["logit_bias"] = bias;
    return post_json(port(), "/v1/completions", body);
  };
  // The greedy first token's id, from a session holding the same prompt.
  ASSERT_EQ(post_json(port(), "/v1/fak/sessions", json{{"id", "lb"}, {"text", prompt}}).status,
            201);
  const HttpReply g = post_json(port(), "/v1/fak/sessions/lb/generate", json{{"max_tokens", 1}});
  ASSERT_EQ(g.status, 200) << g.body;
  const int greedy = g.j()["ids"][0].get<int>();
  const HttpReply plain = complete(nullptr, 1);
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ(plain.j()["choices"][0]["text"], g.j()["text"]);
  const HttpReply banned = complete(json{{std::to_string(greedy), -100}}, 1);
  ASSERT_EQ(banned.status, 200) << banned.body;
  EXPECT_NE(banned.j()["choices"][0]["text"], plain.j()["choices"][0]["text"]);
  // +100 on an unlikely token: it is chosen at every step.
  ASSERT_EQ(post_json(port(), "/v1/fak/sessions", json{{"id", "piece"}, {"ids", {1234}}}).status,
            201);
  const std::string piece =
      get_json(port(), "/v1/fak/sessions/piece").j()["text"].get<std::string>();
  const HttpReply forced = complete(json{{"1234", 100}}, 3);
  ASSERT_EQ(forced.status, 200) << forced.body;
  EXPECT_EQ(forced.j()["choices"][0]["text"], piece + piece + piece);
  // Everything but 1234 banned, as a client banning a whole class of tokens does (8191 entries).
  json all_but = json::object();
  for (int id = 0; id < 8192; ++id)
    if (id != 1234) all_but[std::to_string(id)] = -100;
  const HttpReply only = complete(all_but, 2);
  ASSERT_EQ(only.status, 200) << only.body.substr(0, 300);
  EXPECT_EQ(only.j()["choices"][0]["text"], piece + piece);
  // A small bias changes nothing here; the reply is the plain one.
  EXPECT_EQ(complete(json{{"1234", 0.5}}, 1).j()["choices"][0]["text"],
            plain.j()["choices"][0]["text"]);
  for (const json& bad : {json{{"x", 1}}, json{{"5", 101}}, json{{"-1", 1}}, json{{"99999999", 1}},
                          json{{"5", "a lot"}}, json("no")}) {
    const HttpReply e = complete(bad, 1);
    EXPECT_EQ(e.status, 400) << bad.dump() << " " << e.body;
    EXPECT_NE(e.body.find("logit_bias"), std::string::npos) << e.body;
  }
}

}  // namespace fak::test
