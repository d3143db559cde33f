// `fak serve` under abuse, as an attacker would try it (issue 17): options the sampler refuses,
// JSON nested to overflow the stack, bodies past the limit in every framing, slow clients holding
// connections, padded vocabulary rows at high temperature, a full disk, tenants reaching for each
// other's files, links planted in the session folder, temp files left by a killed writer, and
// fields fak does not implement. Each case must get a clear 4xx (or 507) naming the problem while
// the server goes on answering everyone else. The real binary, driven over raw sockets so the
// tests can send what no well-behaved client library would.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "server_process.h"
#include "test_util.h"

namespace fak::test {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const std::string& bytes) {
  size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return false;
    at += size_t(n);
  }
  return true;
}

// Everything the peer sends until it closes or `timeout` passes with nothing new.
std::string recv_until_close(int fd, std::chrono::milliseconds timeout = 10s) {
  std::string out;
  char buf[16384];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, int(timeout.count())) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  return out;
}

int status_of(const std::string& response) {
  return response.rfind("HTTP/1.", 0) == 0 ? std::atoi(response.c_str() + 9) : 0;
}

json body_of(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  if (at == std::string::npos) return json();
  return json::parse(response.substr(at + 4), nullptr, false);
}

// One request on its own connection ("Connection: close"), the whole response back.
std::string exchange(int port, const std::string& request) {
  const int fd = connect_to(port);
  if (fd < 0) return "";
  send_all(fd, request);
  std::string r = recv_until_close(fd);
  ::close(fd);
  return r;
}

std::string post_request(const std::string& path, const std::string& body,
                         const std::string& key = "key-a") {
  return "POST " + path + " HTTP/1.1\r\nHost: t\r\nConnection: close\r\nAuthorization: Bearer " +
         key +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

std::string get_request(const std::string& path, const std::string& key = "key-a") {
  return "GET " + path + " HTTP/1.1\r\nHost: t\r\nConnection: close\r\nAuthorization: Bearer " +
         key + "\r\n\r\n";
}

json completion(const std::string& prompt, int max_tokens) {
  return {{"model", "pycoder-6m"}, {"prompt", prompt}, {"max_tokens", max_tokens}};
}

// The folder a tenant's saved sessions live in (session_table.cpp names it so).
std::string tenant_folder(const std::string& key) {
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(key.data(), key.size(), d, &len, EVP_sha256(), nullptr);
  std::string name = "tenant-";
  char hex[3];
  for (int i = 0; i < 16; ++i) {
    std::snprintf(hex, sizeof hex, "%02x", d[i]);
    name += hex;
  }
  return name;
}

class ServerAbuse : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The model's whole context: a generation the client leaves must still be running when it
    // leaves (the bundled model decodes ~3,000 tokens/s on an idle core).
    ServerSetup setup;
    setup.ctx = 4096;
    server_ = new ServerProcess(
        "--parallel 2 --max-body 1 --header-timeout 1 --body-timeout 2 --max-connections 64",
        setup);
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static int port() { return server_->port(); }
  static std::string post(const std::string& path, const json& body,
                          const std::string& key = "key-a") {
    return exchange(port(), post_request(path, body.dump(), key));
  }
  // A plain completion still works, and quickly: nothing before it hurt the server.
  static void expect_healthy() {
    ASSERT_TRUE(server_->alive()) << server_->log();
    const auto t0 = Clock::now();
    const std::string r = post("/v1/completions", completion("def add(a, b):", 4));
    EXPECT_EQ(status_of(r), 200) << r;
    EXPECT_LT(Clock::now() - t0, 5s);
  }
  static ServerProcess* server_;
};
ServerProcess* ServerAbuse::server_ = nullptr;

TEST_F(ServerAbuse, SamplingOptionsTheSamplerRefusesAreA400NamingTheField) {
  const std::vector<std::pair<std::string, json>> cases = {{"repetition_penalty", 0},
                                                           {"min_p", 1},
                                                           {"top_p", 0},
                                                           {"temperature", -1},
                                                           {"presence_penalty", 3},
                                                           {"frequency_penalty", -2.5},
                                                           {"top_k", -1}};
  for (const auto& [field, value] : cases) {
    json req = completion("x", 4);
    req[field] = value;
    const std::string r = post("/v1/completions", req);
    EXPECT_EQ(status_of(r), 400) << field << ": " << r;
    EXPECT_EQ(body_of(r)["error"]["param"], field) << r;
    // The session API's generate takes the same fields through the same check.
    json g = {{"max_tokens", 2}, {field, value}};
    EXPECT_EQ(status_of(post("/v1/fak/sessions/none/generate", g)), 400) << field;
  }
  expect_healthy();
}

TEST_F(ServerAbuse, DeeplyNestedJsonIsA400) {
  const std::string deep = "{\"a\":" + std::string(50000, '[') + std::string(50000, ']') + "}";
  const std::string r = exchange(port(), post_request("/v1/completions", deep));
  EXPECT_EQ(status_of(r), 400) << r;
  EXPECT_NE(body_of(r)["error"]["message"].get<std::string>().find("deeper than"),
            std::string::npos);
  // Nested inside a tool call's arguments string too.
  json chat = {
      {"model", "pycoder-6m"},
      {"messages",
       {{{"role", "assistant"},
         {"content", nullptr},
         {"tool_calls",
          {{{"id", "c"},
            {"type", "function"},
            {"function",
             {{"name", "f"}, {"arguments", std::string(5000, '[') + std::string(5000, ']')}}}}}}},
        {{"role", "user"}, {"content", "go"}}}}};
  EXPECT_EQ(status_of(post("/v1/chat/completions", chat)), 400);
  expect_healthy();
}

TEST_F(ServerAbuse, BodiesPastTheLimitAreRefusedWhateverTheirFraming) {
  const long rss_before = server_->peak_rss_kib();
  // Chunked, 8x the 1 MiB limit: refused once it passes the limit, never held in memory.
  const int fd = connect_to(port());
  ASSERT_GE(fd, 0);
  send_all(fd,
           "POST /v1/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer key-a\r\n"
           "Transfer-Encoding: chunked\r\n\r\n");
  const std::string piece(64 << 10, 'x');
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
  for (int i = 0; i < 128 && send_all(fd, size + piece + "\r\n"); ++i) {
  }
  const std::string chunked = recv_until_close(fd);
  ::close(fd);
  EXPECT_EQ(status_of(chunked), 413) << chunked;
  EXPECT_EQ(body_of(chunked)["error"]["code"], "body_too_large");
  const long rss_after = server_->peak_rss_kib();
  if (rss_before > 0) {
    EXPECT_LT(rss_after - rss_before, 32 << 10) << "KiB";
  }

  // A huge Content-Length: refused at once, before any of the body is sent.
  const int fd2 = connect_to(port());
  send_all(fd2,
           "POST /v1/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer key-a\r\n"
           "Content-Length: 1000000000000\r\n\r\n");
  const auto t0 = Clock::now();
  const std::string huge = recv_until_close(fd2, 5s);
  ::close(fd2);
  EXPECT_EQ(status_of(huge), 413) << huge;
  EXPECT_LT(Clock::now() - t0, 3s);

  // A POST that says nothing of its length.
  const std::string no_length = exchange(
      port(), "POST /v1/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer key-a\r\n\r\n");
  EXPECT_EQ(status_of(no_length), 411) << no_length;
  EXPECT_EQ(body_of(no_length)["error"]["code"], "length_required");

  // The same refusals on /v1/messages come in Anthropic's error shape, which its clients read.
  const std::string anthropic_huge =
      exchange(port(),
               "POST /v1/messages HTTP/1.1\r\nHost: t\r\nx-api-key: key-a\r\n"
               "Content-Length: 1000000000000\r\n\r\n");
  EXPECT_EQ(status_of(anthropic_huge), 413) << anthropic_huge;
  EXPECT_EQ(body_of(anthropic_huge)["type"], "error") << anthropic_huge;
  EXPECT_EQ(body_of(anthropic_huge)["error"]["type"], "request_too_large") << anthropic_huge;
  const std::string anthropic_no_length =
      exchange(port(), "POST /v1/messages HTTP/1.1\r\nHost: t\r\nx-api-key: key-a\r\n\r\n");
  EXPECT_EQ(status_of(anthropic_no_length), 411) << anthropic_no_length;
  EXPECT_EQ(body_of(anthropic_no_length)["type"], "error") << anthropic_no_length;
  const std::string wrong_method =
      exchange(port(), "GET /v1/messages HTTP/1.1\r\nHost: t\r\nx-api-key: key-a\r\n\r\n");
  EXPECT_EQ(status_of(wrong_method), 405) << wrong_method;
  EXPECT_EQ(body_of(wrong_method)["type"], "error") << wrong_method;

  // Expect: 100-continue is honoured before the body is read.
  const std::string body = completion("import", 2).dump();
  const std::string expecting =
      exchange(port(),
               "POST /v1/completions HTTP/1.1\r\nHost: t\r\nConnection: close\r\nAuthorization: "
               "Bearer key-a\r\nExpect: 100-continue\r\nContent-Length: " +
                   std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_EQ(expecting.rfind("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200", 0), 0u) << expecting;
  expect_healthy();
}

TEST_F(ServerAbuse, SlowClientsNeitherStarveOthersNorStayForever) {
  // Twice the connection cap, each sending a request head a few bytes at a time (slowloris).
  std::vector<int> slow;
  for (int i = 0; i < 128; ++i) {
    const int fd = connect_to(port());
    ASSERT_GE(fd, 0);
    send_all(fd, "GET /health HTTP/1.1\r\nHo");
    slow.push_back(fd);
  }
  std::atomic<bool> trickling{true};
  std::thread trickle([&] {
    while (trickling) {
      for (int fd : slow) send_all(fd, "s");
      std::this_thread::sleep_for(100ms);
    }
  });
  // Everyone else is served at once: the health check and a generation.
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    const std::string h = exchange(port(), get_request("/health"));
    EXPECT_EQ(status_of(h), 200) << h;
    EXPECT_LT(Clock::now() - t0, 1s);
  }
  expect_healthy();
  // The trickling heads pass the 1 s header deadline: the server closes every one of them.
  std::this_thread::sleep_for(2500ms);
  trickling = false;
  trickle.join();
  int closed = 0;
  for (int fd : slow) {
    pollfd p{fd, POLLIN, 0};
    char c;
    if (::poll(&p, 1, 2000) == 1 && ::recv(fd, &c, 1, 0) <= 0) ++closed;
    ::close(fd);
  }
  EXPECT_EQ(closed, int(slow.size()));
  expect_healthy();
}

TEST_F(ServerAbuse, ClientThatLeavesANonStreamedGenerationCancelsIt) {
  const auto cancelled = [] {
    const std::string m = exchange(port(), get_request("/metrics"));
    const size_t at = m.find("\nfak_requests_cancelled_total ");
    return at == std::string::npos ? -1 : std::atoi(m.c_str() + at + 30);
  };
  const int before = cancelled();
  json req = completion("def main():", 4000);
  req["ignore_eos"] = true;
  const int fd = connect_to(port());
  send_all(fd, post_request("/v1/completions", req.dump()));
  std::this_thread::sleep_for(200ms);
  ::close(fd);
  bool seen = false;
  for (int i = 0; i < 100 && !seen; ++i) {
    seen = cancelled() > before;
    if (!seen) std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(seen);
  expect_healthy();
}

TEST_F(ServerAbuse, PenaltiesAreAppliedAndUnsupportedFieldsRefused) {
  json plain = completion("x = [1, 1, 1, 1, 1, 1, 1, 1,", 24);
  plain["ignore_eos"] = true;
  json penalised = plain;
  penalised["frequency_penalty"] = 2.0;
  penalised["presence_penalty"] = 1.0;
  const auto text = [&](const json& req) {
    const std::string r = post("/v1/completions", req);
    EXPECT_EQ(status_of(r), 200) << r;
    return body_of(r)["choices"][0]["text"].get<std::string>();
  };
  const std::string a = text(plain), b = text(penalised);
  EXPECT_NE(a, b) << "penalties changed nothing: " << a;
  EXPECT_EQ(b, text(penalised));  // greedy and penalised is still deterministic
  for (const auto& [field, value] : std::vector<std::pair<std::string, json>>{
           {"echo", true}, {"suffix", "x"}, {"logit_bias", {{"1", 500}}}}) {
    json req = completion("x", 2);
    req[field] = value;
    const std::string r = post("/v1/completions", req);
    EXPECT_EQ(status_of(r), 400) << field << ": " << r;
    EXPECT_EQ(body_of(r)["error"]["param"], field);
  }
}

TEST(ServerAbusePadded, HighTemperatureNeverStreamsAnIdTheTokenizerCannotDecode) {
  // Before: a padded row sampled at high temperature threw while decoding and killed the server.
  ServerProcess server("-m " + padded_vocab_model(300).string() + " --parallel 2");
  ASSERT_NE(server.port(), 0);
  for (int seed = 0; seed < 8; ++seed) {
    json req = {{"model", "padded"},  {"prompt", {1, 2, 3}}, {"max_tokens", 64},
                {"temperature", 2.0}, {"seed", seed},        {"ignore_eos", true},
                {"stream", true}};
    const std::string r = exchange(server.port(), post_request("/v1/completions", req.dump()));
    EXPECT_EQ(status_of(r), 200) << r;
    EXPECT_EQ(r.find("\"error\""), std::string::npos) << r;
    EXPECT_NE(r.find("data: [DONE]"), std::string::npos) << r;
  }
  EXPECT_TRUE(server.alive());
}

TEST(ServerAbuseDisk, AFullDiskIsA507AndLeavesNothingBehind) {
  // Writes past 40 blocks fail (EFBIG), as a full disk would fail them; a session file of the
  // bundled model is bigger than that.
  ServerSetup setup;
  setup.shell_prefix = "ulimit -f 40;";
  ServerProcess server("--parallel 1", setup);
  ASSERT_NE(server.port(), 0);
  ASSERT_EQ(status_of(exchange(
                server.port(),
                post_request("/v1/fak/sessions", json{{"id", "s"}, {"text", "def f(x):"}}.dump()))),
            201);
  const std::string r = exchange(
      server.port(), post_request("/v1/fak/sessions/s/save", json{{"name", "big"}}.dump()));
  EXPECT_EQ(status_of(r), 507) << r;
  EXPECT_EQ(body_of(r)["error"]["code"], "insufficient_storage");
  for (const auto& e : std::filesystem::recursive_directory_iterator(server.dir() / "sessions"))
    EXPECT_FALSE(e.is_regular_file()) << "left behind: " << e.path();
  EXPECT_TRUE(server.alive());
  EXPECT_EQ(status_of(exchange(server.port(), get_request("/v1/fak/sessions/s"))), 200);
}

TEST(ServerAbuseDisk, PlantedLinksAreNotFollowedAndStaleTempFilesGo) {
  const std::filesystem::path outside = temp_dir() / "outside";
  std::filesystem::create_directories(outside);
  // A pid that runs no process: its temp files are stale. This test's own pid is alive.
  pid_t dead = 999999;
  while (::kill(dead, 0) == 0 || errno != ESRCH) --dead;
  const std::string stale = ".snap.faksession.tmp-" + std::to_string(dead) + "-0";
  const std::string live = ".snap.faksession.tmp-" + std::to_string(::getpid()) + "-0";
  ServerSetup setup;
  setup.before_start = [&](const std::filesystem::path& dir) {
    const auto sessions = dir / "sessions";
    std::filesystem::create_directories(sessions / tenant_folder("key-b"));
    write_file(sessions / tenant_folder("key-b") / stale, "half a file");
    write_file(sessions / stale, "half a file");
    write_file(sessions / live, "being written");
    // key-a's folder is a link to somewhere else.
    std::filesystem::create_directory_symlink(outside, sessions / tenant_folder("key-a"));
  };
  ServerProcess server("--parallel 1", setup);
  ASSERT_NE(server.port(), 0);
  const auto sessions = server.dir() / "sessions";
  EXPECT_FALSE(std::filesystem::exists(sessions / tenant_folder("key-b") / stale));
  EXPECT_FALSE(std::filesystem::exists(sessions / stale));
  EXPECT_TRUE(std::filesystem::exists(sessions / live));
  ASSERT_EQ(status_of(exchange(
                server.port(),
                post_request("/v1/fak/sessions", json{{"id", "s"}, {"text", "def f(x):"}}.dump()))),
            201);
  const std::string r = exchange(
      server.port(), post_request("/v1/fak/sessions/s/save", json{{"name", "snap"}}.dump()));
  EXPECT_EQ(status_of(r), 500) << r;
  EXPECT_EQ(body_of(r)["error"]["code"], "storage_error");
  EXPECT_TRUE(std::filesystem::is_empty(outside));
  // key-b's folder is real: its save works.
  ASSERT_EQ(status_of(exchange(server.port(),
                               post_request("/v1/fak/sessions",
                                            json{{"id", "t"}, {"text", "x = 1"}}.dump(), "key-b"))),
            201);
  EXPECT_EQ(
      status_of(exchange(server.port(), post_request("/v1/fak/sessions/t/save",
                                                     json{{"name", "snap"}}.dump(), "key-b"))),
      200);
}

}  // namespace
}  // namespace fak::test

namespace fak::test {
namespace {

TEST(ServerAbuseQuota, OneTenantsSessionsCannotTakeEveryonesKvMemory) {
  // 8 MiB of KV holds 1,820 tokens of the bundled model: sessions may hold half of that, one key's
  // a quarter (but always one 512-token context).
  ServerProcess server("--parallel 2 --kv-mem 8 --kv-type f32 --kraw");  // 4608 bytes a token
  ASSERT_NE(server.port(), 0);
  std::string text;
  for (int i = 0; i < 40; ++i) text += "x" + std::to_string(i) + " = " + std::to_string(i) + "\n";
  const auto create = [&](const std::string& id, const std::string& key) {
    return exchange(server.port(),
                    post_request("/v1/fak/sessions", json{{"id", id}, {"text", text}}.dump(), key));
  };
  const std::string first = create("a1", "key-a");
  ASSERT_EQ(status_of(first), 201) << first;
  const int size = body_of(first)["size"];
  ASSERT_GT(size, 256);
  ASSERT_LE(size, 512);
  const std::string second = create("a2", "key-a");
  EXPECT_EQ(status_of(second), 429) << second;
  EXPECT_EQ(body_of(second)["error"]["code"], "session_quota_exceeded");
  const std::string clone =
      exchange(server.port(), post_request("/v1/fak/sessions/a1/clone", json{{"id", "a3"}}.dump()));
  EXPECT_EQ(status_of(clone), 429) << clone;
  // The other tenant is not held back by the first one's sessions.
  EXPECT_EQ(status_of(create("b1", "key-b")), 201);
  const std::string reply = exchange(
      server.port(), post_request("/v1/completions", completion("def f(x):", 8).dump(), "key-b"));
  EXPECT_EQ(status_of(reply), 200) << reply;
  // Deleting frees the quota.
  EXPECT_EQ(status_of(exchange(server.port(),
                               "DELETE /v1/fak/sessions/a1 HTTP/1.1\r\nHost: t\r\n"
                               "Connection: close\r\nAuthorization: Bearer "
                               "key-a\r\n\r\n")),
            200);
  EXPECT_EQ(status_of(create("a2", "key-a")), 201);
}

}  // namespace
}  // namespace fak::test
