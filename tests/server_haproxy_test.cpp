// deploy/haproxy.cfg in front of two `fak serve --store` replicas (issue 25), all real processes:
// agents that resend their growing context every turn, streaming, run through HAProxy while the
// replica that served the most of them is SIGKILLed. Every agent finishes, each turn with the
// reply a single server gives (an agent retries a turn whose stream broke, as agent SDKs do), and
// the agents that moved found their prefixes in the store.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "core/json.h"
#include "http_test_client.h"
#include "server_process.h"
#include "store_processes.h"
#include "test_util.h"

namespace fak::test {
namespace {

using json = fak::ojson;

constexpr int kAgents = 6, kTurns = 6;

std::string system_prompt() {
  std::string s = "You are a coding agent. Tools:\n";
  for (int i = 0; i < 12; ++i)
    s += "def tool_" + std::to_string(i) + "(path):\n    return open(path).read()[" +
         std::to_string(i) + ":]\n";
  return s;
}

// One streamed turn; "" when the stream did not end whole (the replica died, the proxy refused).
std::string stream_turn(int port, const json& messages, const std::string& agent) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  httplib::Request r;
  r.method = "POST";
  r.path = "/v1/chat/completions";
  r.body = json{{"model", "pycoder-6m"},
                {"max_tokens", 24},
                {"temperature", 0},
                {"stream", true},
                {"messages", messages}}
               .dump();
  r.set_header("Content-Type", "application/json");
  r.set_header("Authorization", "Bearer key-a");
  r.set_header("X-Fak-Affinity", agent);
  std::string raw;
  r.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    raw.append(d, n);
    return true;
  };
  const auto res = c.send(r);
  if (!res || res->status != 200 || raw.find("data: [DONE]") == std::string::npos) return "";
  std::string text;
  bool finished = false;
  for (size_t at = 0; (at = raw.find("data: ", at)) != std::string::npos;) {
    const size_t end = raw.find("\n\n", at);
    if (end == std::string::npos) return "";
    const std::string payload = raw.substr(at + 6, end - at - 6);
    at = end;
    if (payload == "[DONE]") break;
    const json e = json::parse(payload, nullptr, false);
    if (!e.is_object() || !e.contains("choices") || e["choices"].empty()) continue;
    const json& choice = e["choices"][0];
    if (choice["delta"].contains("content") && choice["delta"]["content"].is_string())
      text += choice["delta"]["content"].get<std::string>();
    finished = finished || !choice["finish_reason"].is_null();
  }
  return finished ? text : "";
}

// An agent's conversation: every turn resends all of it.
struct Agent {
  std::string name;
  json messages;
  std::vector<std::string> replies;
  int retries = 0;
};

Agent new_agent(int i) {
  Agent a;
  a.name = "agent-" + std::to_string(i);
  a.messages = json::array({{{"role", "system"}, {"content", system_prompt()}},
                            {{"role", "user"}, {"content", "task " + std::to_string(i)}}});
  return a;
}

// Runs the agent's next turn until it succeeds (up to 40 tries).
bool turn(int port, Agent& a, int t) {
  for (int attempt = 0; attempt < 40; ++attempt) {
    const std::string reply = stream_turn(port, a.messages, a.name);
    if (!reply.empty()) {
      a.replies.push_back(reply);
      a.messages.push_back({{"role", "assistant"}, {"content", reply}});
      a.messages.push_back(
          {{"role", "user"}, {"content", "turn " + std::to_string(t) + ": go on"}});
      return true;
    }
    ++a.retries;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return false;
}

double completions_served(int port) {
  const std::string text = get_json(port, "/metrics").body;
  const std::string key = "fak_requests_total{route=\"/v1/chat/completions\",status=\"200\"} ";
  const size_t at = text.find(key);
  return at == std::string::npos ? 0 : std::atof(text.c_str() + at + key.size());
}

double metric(int port, const std::string& name) {
  const std::string text = get_json(port, "/metrics").body;
  const size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::atof(text.c_str() + at + name.size() + 2);
}

}  // namespace

TEST(ServerHaproxy, AgentsFinishWithOneServersRepliesWhileAReplicaIsKilled) {
  ServerSetup s;
  s.ctx = 2048;
  // The reference: one server, no store, each agent alone.
  std::vector<std::vector<std::string>> want;
  {
    ServerProcess single("--parallel 4", s);
    ASSERT_NE(single.port(), 0);
    for (int i = 0; i < kAgents; ++i) {
      Agent a = new_agent(i);
      for (int t = 0; t < kTurns; ++t) ASSERT_TRUE(turn(single.port(), a, t)) << a.name;
      EXPECT_EQ(a.retries, 0);
      want.push_back(a.replies);
    }
  }
  RedisProcess redis;
  const std::string args = "--parallel 4 --store " + redis.url() + " --store-recovery-grace 500";
  ServerProcess r1(args, s), r2(args, s);
  ASSERT_TRUE(r1.port() && r2.port());
  HaproxyProcess lb({r1.port(), r2.port()});
  ASSERT_NE(lb.port(), 0) << lb.log();

  std::vector<Agent> agents;
  for (int i = 0; i < kAgents; ++i) agents.push_back(new_agent(i));
  // A third of the way through, every agent waits at a gate: the kill then always strands the
  // victim's agents with turns left, after the victim has published their prefixes (blocks reach
  // the store after a reply, and on a loaded host that can lag behind the next turn).
  constexpr int kTurnsBeforeKill = kTurns / 3;
  std::atomic<int> at_gate{0};
  std::atomic<bool> gate_open{false};
  std::vector<std::thread> threads;
  std::vector<int> ok(kAgents, 0);
  for (int i = 0; i < kAgents; ++i)
    threads.emplace_back([&, i] {
      for (int t = 0; t < kTurns; ++t) {
        if (t == kTurnsBeforeKill) {
          ++at_gate;
          while (!gate_open) std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        if (!turn(lb.port(), agents[size_t(i)], t)) {
          if (t < kTurnsBeforeKill) ++at_gate;
          return;
        }
      }
      ok[size_t(i)] = 1;
    });
  for (int i = 0; i < 60000 && at_gate < kAgents; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // The replica that served the most goes without a word.
  const double n1 = completions_served(r1.port()), n2 = completions_served(r2.port());
  ServerProcess& victim = n1 >= n2 ? r1 : r2;
  ServerProcess& survivor = n1 >= n2 ? r2 : r1;
  EXPECT_GT(std::max(n1, n2), 0);
  for (int i = 0; i < 2000; ++i) {
    if (metric(victim.port(), "fak_store_published_blocks_total") > 0 &&
        metric(victim.port(), "fak_store_upload_queue_bytes") == 0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // Killed mid-turn where it can be: once one of its agents' next requests is being served.
  gate_open = true;
  for (int i = 0; i < 2000 && metric(victim.port(), "fak_active_sequences") <= 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ::kill(victim.pid(), SIGKILL);
  for (auto& t : threads) t.join();

  int retries = 0;
  for (int i = 0; i < kAgents; ++i) {
    EXPECT_EQ(ok[size_t(i)], 1) << agents[size_t(i)].name << " did not finish";
    EXPECT_EQ(agents[size_t(i)].replies, want[size_t(i)]) << agents[size_t(i)].name;
    retries += agents[size_t(i)].retries;
  }
  // The survivor served the rest, and the agents that moved started from the blocks the dead
  // replica had published.
  EXPECT_GT(metric(survivor.port(), "fak_store_hit_blocks_total"), 0);
  std::printf("agents' retries after the kill: %d\n", retries);
}

}  // namespace fak::test
