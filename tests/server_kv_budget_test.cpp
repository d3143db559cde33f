// `fak serve` under one KV budget (runtime/kv_budget.h), end to end with the bundled model: the
// reported agent case (a long system prompt, a side request with another prompt, the next turn)
// keeps its whole prefix under the default budget and, under a small one, the side requests go
// before the agent's prefix; past the budget a sequence or a session fails with a clear error and
// the server goes on.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "server_process.h"
#include "test_util.h"

namespace fak::test {
namespace {

// The budgets below are sized in tokens of f32 K + V + Kraw (4608 bytes each for the bundled
// model), the layout these tests were written for; the default (f16 K + V) is checked on its own.
const std::string kF32Kraw = " --kv-type f32 --kraw";

using json = nlohmann::json;
using namespace std::chrono_literals;

struct Client {
  explicit Client(const ServerProcess& s) : c("127.0.0.1", s.port()) {
    c.set_read_timeout(120, 0);
    c.set_bearer_token_auth("key-a");
  }
  httplib::Result post(const std::string& path, const json& body) {
    return c.Post(path.c_str(), body.dump(), "application/json");
  }
  json ok(const std::string& path, const json& body) {
    auto r = post(path, body);
    EXPECT_TRUE(r);
    if (!r) return json();
    EXPECT_EQ(r->status, path == "/v1/fak/sessions" ? 201 : 200) << r->body;
    return json::parse(r->body);
  }
  double metric(const std::string& name) {
    auto r = c.Get("/metrics");
    if (!r) return -1;
    const size_t at = r->body.find("\n" + name + " ");
    return at == std::string::npos ? -1 : std::stod(r->body.substr(at + name.size() + 2));
  }
  httplib::Client c;
};

// An agent's system prompt of ~3000 tokens (Qwen Code sends ~15k), in the bundled model's
// language.
std::string long_system_prompt() {
  std::string s = "You are a coding agent. These are the tools of this repository:\n";
  for (int i = 0; i < 80; ++i)
    s += "def tool_" + std::to_string(i) + "(path, mode='r'):\n    \"\"\"Open " +
         std::to_string(i) + " and count.\"\"\"\n    return len(open(path, mode).read()) + " +
         std::to_string(i) + "\n";
  return s;
}

// A side request of about `lines` x 10 tokens with a prompt of its own (a title, a summary).
json side_request(const std::string& topic, int lines) {
  std::string text = "Summarise in one line:\n";
  for (int i = 0; i < lines; ++i)
    text += topic + " item " + std::to_string(i) + " = " + topic + "\n";
  return {{"model", "pycoder-6m"},
          {"max_tokens", 8},
          {"temperature", 0},
          {"messages",
           {{{"role", "system"}, {"content", "You write short titles."}},
            {{"role", "user"}, {"content", text}}}}};
}

json agent_turn(const json& messages) {
  return {{"model", "pycoder-6m"}, {"max_tokens", 16}, {"temperature", 0}, {"messages", messages}};
}

ServerSetup with_ctx(int ctx) {
  ServerSetup s;
  s.ctx = ctx;
  return s;
}

int cached(const json& reply) {
  return reply["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
}
int prompt_tokens(const json& reply) {
  return reply["usage"]["prompt_tokens"].get<int>();
}

// Turn 1, a side request, turn 2 (and a second side request and turn 3 when `more`): returns the
// replies in order.
std::vector<json> agent_scenario(Client& c, bool more) {
  std::vector<json> out;
  json msgs = {{{"role", "system"}, {"content", long_system_prompt()}},
               {{"role", "user"}, {"content", "write tool_80"}}};
  auto next_turn = [&](const std::string& user) {
    json r = c.ok("/v1/chat/completions", agent_turn(msgs));
    out.push_back(r);
    msgs.push_back({{"role", "assistant"}, {"content", r["choices"][0]["message"]["content"]}});
    msgs.push_back({{"role", "user"}, {"content", user}});
  };
  next_turn("now write tool_81");
  if (more) next_turn("and tool_82");
  out.push_back(c.ok("/v1/chat/completions", side_request("alpha", 48)));
  if (more) out.push_back(c.ok("/v1/chat/completions", side_request("beta", 48)));
  out.push_back(c.ok("/v1/chat/completions", agent_turn(msgs)));
  return out;
}

// The reported scenario under the default budget: nothing is evicted and the next turn reuses the
// whole earlier prompt and reply (to the token).
TEST(ServerKvBudget, DefaultBudgetKeepsTheAgentPrefixAcrossASideRequest) {
  ServerProcess server("--parallel 4", with_ctx(4096));
  ASSERT_NE(server.port(), 0);
  const std::string log = server.log();
  // The default KV is llama.cpp's: f16 K and V, no pre-RoPE keys.
  EXPECT_NE(log.find("KV 1536 bytes/token (6 attention layers x (K + V) x 2 KV heads x 32 "
                     "dims x 2 bytes, f16)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("KV budget 280 MiB (ctx 4096 x parallel 4 = 24 MiB + prefix cache room 256 "
                     "MiB;"),
            std::string::npos)
      << log;
  Client c(server);
  auto r = agent_scenario(c, false);
  const json &turn1 = r[0], &side = r[1], &turn2 = r[2];
  ASSERT_GE(prompt_tokens(turn1), 2800) << turn1.dump();
  EXPECT_LT(cached(side), 16) << "only the chat template's first tokens are shared";
  EXPECT_GT(cached(turn2), prompt_tokens(turn1))
      << "turn 1 prompt " << prompt_tokens(turn1) << ", turn 2 " << prompt_tokens(turn2);
  EXPECT_EQ(c.metric("fak_prefix_cache_evicted_blocks_total"), 0);
  EXPECT_LE(c.metric("fak_kv_mapped_bytes"), c.metric("fak_kv_budget_bytes"));
  std::printf("[ default budget ] turn 1: %d prompt tokens; side: %d; turn 2: %d of %d cached\n",
              prompt_tokens(turn1), prompt_tokens(side), cached(turn2), prompt_tokens(turn2));
}

// `fak serve` as a user starts it: the whole budget mapped and a warm-up run before it listens,
// neither of which leaves anything behind (no block in use, nothing cached) or changes a reply.
TEST(ServerKvBudget, ServeMapsTheBudgetAndWarmsUpBeforeListening) {
  ServerSetup full = with_ctx(1024);
  full.quick_start = false;
  ServerProcess server("--parallel 3 --kv-mem 64" + kF32Kraw, full);
  ASSERT_NE(server.port(), 0);
  const std::string log = server.log();
  EXPECT_NE(log.find("MiB mapped at start in"), std::string::npos) << log;
  EXPECT_NE(log.find("warmed up in"), std::string::npos) << log;
  EXPECT_LT(log.find("warmed up in"), log.find("listening on")) << log;
  Client c(server);
  // All the budget holds in whole slabs (a little under 64 MiB).
  EXPECT_EQ(c.metric("fak_kv_mapped_bytes"),
            c.metric("fak_kv_capacity_tokens") * c.metric("fak_kv_bytes_per_token"));
  EXPECT_GT(c.metric("fak_kv_mapped_bytes"), 60 << 20);
  EXPECT_EQ(c.metric("fak_kv_used_bytes"), 0) << "the warm-up's sequences are gone";
  ServerProcess lazy("--parallel 3 --kv-mem 64" + kF32Kraw, with_ctx(1024));
  ASSERT_NE(lazy.port(), 0);
  EXPECT_EQ(lazy.log().find("warmed up in"), std::string::npos);
  Client l(lazy);
  EXPECT_LT(l.metric("fak_kv_mapped_bytes"), 60 << 20);
  const json body = side_request("gamma", 12);
  const json a = c.ok("/v1/chat/completions", body), b = l.ok("/v1/chat/completions", body);
  EXPECT_EQ(cached(a), 0) << "the warm-up put nothing in the prefix cache";
  EXPECT_EQ(a["choices"][0]["message"]["content"], b["choices"][0]["message"]["content"]);
  EXPECT_EQ(prompt_tokens(a), prompt_tokens(b));
}

// A budget that cannot hold everything (16 MiB = 3584 tokens: the agent's ~3100 and two side
// requests of ~430): the side requests are what goes, the older one first, and the agent's third
// turn still reuses its whole second-turn prompt. Least-recently-used eviction would have cut the
// agent's tail instead (it is the oldest). The context is cut to what the budget holds.
TEST(ServerKvBudget, SmallBudgetDropsSideRequestsBeforeTheAgentPrefix) {
  ServerProcess server("--parallel 2 --kv-mem 16" + kF32Kraw, with_ctx(4096));
  ASSERT_NE(server.port(), 0);
  const std::string log = server.log();
  EXPECT_NE(log.find("KV budget 16 MiB (--kv-mem;"), std::string::npos) << log;
  EXPECT_NE(log.find("holds 3584 tokens"), std::string::npos) << log;
  EXPECT_NE(log.find("context cut from 4096 to 3584 tokens"), std::string::npos) << log;
  Client c(server);
  auto models = c.c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["context_length"], 3584);
  auto r = agent_scenario(c, true);
  const json &turn1 = r[0], &turn2 = r[1], &side1 = r[2], &side2 = r[3], &turn3 = r[4];
  ASSERT_GE(prompt_tokens(side1), 400);
  EXPECT_GE(cached(turn2), prompt_tokens(turn1) / 32 * 32);
  EXPECT_GE(cached(turn3), prompt_tokens(turn2) / 32 * 32)
      << "the agent lost its prefix to the side requests";
  EXPECT_GT(c.metric("fak_prefix_cache_reclaimed_blocks_total"), 0);
  // The first side request's prompt is what went.
  json again = c.ok("/v1/chat/completions", side_request("alpha", 48));
  EXPECT_LT(cached(again), prompt_tokens(side1) / 32 * 32);
  EXPECT_LE(c.metric("fak_kv_mapped_bytes"), 16 << 20);
  std::printf(
      "[ --kv-mem 16 ] turn 1: %d; turn 2: %d of %d cached; side 1: %d, side 2: %d; turn 3: %d of "
      "%d cached; side 1 again: %d of %d cached; blocks given back: %.0f\n",
      prompt_tokens(turn1), cached(turn2), prompt_tokens(turn2), prompt_tokens(side1),
      prompt_tokens(side2), cached(turn3), prompt_tokens(turn3), cached(again),
      prompt_tokens(again), c.metric("fak_prefix_cache_reclaimed_blocks_total"));
}

// Two sequences that cannot both fit (2 MiB = 448 tokens; each wants ~440): the newer one is
// stopped with an error naming the budget, the older one finishes whole, and the server goes on.
TEST(ServerKvBudget, SequencesPastTheBudgetFailClearlyAndTheOlderOneFinishes) {
  ServerProcess server("--parallel 2 --kv-mem 2" + kF32Kraw);
  ASSERT_NE(server.port(), 0);
  EXPECT_NE(server.log().find("holds 448 tokens"), std::string::npos) << server.log();
  auto prompt = [](const std::string& name) {
    std::string p;
    for (int i = 0; i < 8; ++i) p += "def " + name + std::to_string(i) + "(x):\n    return x\n";
    return p;
  };
  std::atomic<int> chunks{0};
  std::string older_body;
  std::thread older([&] {
    httplib::Client c("127.0.0.1", server.port());
    c.set_read_timeout(120, 0);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = json{{"model", "pycoder-6m"},
                    {"prompt", prompt("older")},
                    {"max_tokens", 340},
                    {"ignore_eos", true},
                    {"temperature", 0},
                    {"stream", true},
                    {"stream_options", {{"include_usage", true}}}}
                   .dump();
    req.set_header("Authorization", "Bearer key-a");
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      older_body.append(data, n);
      ++chunks;
      return true;
    };
    c.send(req);
  });
  for (int i = 0; i < 6000 && chunks < 3; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_GE(chunks, 3) << "the first request never streamed";
  Client c(server);
  auto newer = c.post("/v1/completions", json{{"model", "pycoder-6m"},
                                              {"prompt", prompt("newer")},
                                              {"max_tokens", 340},
                                              {"ignore_eos", true}});
  older.join();
  ASSERT_TRUE(newer);
  EXPECT_EQ(newer->status, 503) << newer->body;  // the server's memory, not the request: retry
  EXPECT_EQ(newer->get_header_value("Retry-After"), "1");
  const std::string msg = json::parse(newer->body)["error"]["message"];
  EXPECT_NE(msg.find("KV memory budget spent"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(--kv-mem 2 MiB); retry later"), std::string::npos) << msg;
  EXPECT_EQ(older_body.find("\"error\""), std::string::npos) << older_body;
  EXPECT_NE(older_body.find("\"completion_tokens\":340"), std::string::npos) << older_body;
  EXPECT_NE(older_body.find("\"finish_reason\":\"length\""), std::string::npos);
  // Nothing is left held: a request as large as the budget allows runs now.
  json again = c.ok("/v1/completions", json{{"model", "pycoder-6m"},
                                            {"prompt", prompt("newer")},
                                            {"max_tokens", 340},
                                            {"ignore_eos", true}});
  EXPECT_EQ(again["usage"]["completion_tokens"], 340);
  EXPECT_LE(c.metric("fak_kv_mapped_bytes"), 2 << 20);
}

// /v1/fak/ sessions hold blocks of the same budget: a session that does not fit is a 503 with
// Retry-After, and fits once another is deleted.
TEST(ServerKvBudget, SessionsStayWithinTheirShareOfTheBudget) {
  // 2 MiB holds 448 tokens (the context is cut to that too): sessions may hold one context.
  ServerProcess server("--parallel 1 --kv-mem 2" + kF32Kraw);
  ASSERT_NE(server.port(), 0);
  Client c(server);
  auto ids = [](int n, int seed) {
    json a = json::array();
    for (int i = 0; i < n; ++i) a.push_back(100 + (i * 7 + seed) % 1000);
    return a;
  };
  c.ok("/v1/fak/sessions", json{{"id", "big"}, {"ids", ids(400, 1)}});  // 13 of 14 blocks
  auto r = c.post("/v1/fak/sessions", json{{"id", "small"}, {"ids", ids(100, 2)}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429) << r->body;
  const json err = json::parse(r->body)["error"];
  EXPECT_EQ(err["code"], "session_quota_exceeded");
  EXPECT_NE(err["message"].get<std::string>().find("would hold 500 tokens"), std::string::npos)
      << err.dump();
  EXPECT_EQ(c.c.Get("/v1/fak/sessions/small")->status, 404);  // not left half-made
  EXPECT_EQ(c.c.Delete("/v1/fak/sessions/big")->status, 200);
  c.ok("/v1/fak/sessions", json{{"id", "small"}, {"ids", ids(100, 2)}});
}

}  // namespace
}  // namespace fak::test
