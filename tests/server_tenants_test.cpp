// `fak serve` as one tenant among others sees it (issue 23): a fair share of the queue, the batch,
// each step's prompt reading and the KV memory for every API key, and session edits (a 3k-token
// create, an exact quarantine's replay) read in chunks like any prompt, so no tenant stalls or
// starves the others.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "core/json.h"
#include "http_test_client.h"
#include "server/fair_share.h"
#include "server_process.h"
#include "test_util.h"

namespace fak::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(FairShare, QueueVictimIsTheNewestOfTheKeyFurthestOverItsShare) {
  using server::queue_victim;
  // One key filled the queue: another key still gets in, in place of the first key's newest.
  EXPECT_EQ(queue_victim({"a", "a", "a", "a"}, "b", 4), std::optional<size_t>(3));
  // At its share, a key is refused itself.
  EXPECT_EQ(queue_victim({"a", "a", "b", "b"}, "b", 4), std::nullopt);
  EXPECT_EQ(queue_victim({"a", "a", "a", "a"}, "a", 4), std::nullopt);
  // Three keys: c (share 2 of 6) takes the place of a's newest, a being 2 over, b 0.
  EXPECT_EQ(queue_victim({"a", "b", "a", "a", "b", "a"}, "c", 6), std::optional<size_t>(5));
}

TEST(FairShare, AdmissionIsRoundRobinBetweenKeys) {
  using server::next_admitted;
  // Fewest running first, then the key admitted least recently, then the oldest request.
  EXPECT_EQ(next_admitted({"a", "a", "b"}, {1, 1, 0}, {5, 5, 0}), 2u);
  EXPECT_EQ(next_admitted({"a", "a", "b"}, {0, 0, 0}, {5, 5, 3}), 2u);
  EXPECT_EQ(next_admitted({"a", "b", "b"}, {0, 0, 0}, {3, 5, 5}), 0u);
}

TEST(FairShare, PrefillIsSharedBetweenKeys) {
  using server::share_prefill;
  // One key's 32k-token prompt and another key's 300: each key gets half of the step.
  EXPECT_EQ(share_prefill(256, {32000, 300}, {"a", "b"}), (std::vector<int>{128, 128}));
  // What a key cannot use goes to the others, oldest first.
  EXPECT_EQ(share_prefill(256, {32000, 10, 5000}, {"a", "b", "a"}), (std::vector<int>{246, 10, 0}));
  // One key alone: oldest first, as before.
  EXPECT_EQ(share_prefill(256, {100, 500}, {"a", "a"}), (std::vector<int>{100, 156}));
  EXPECT_EQ(share_prefill(2, {5, 5, 5}, {"a", "b", "c"}), (std::vector<int>{1, 1, 0}));
}

TEST(FairShare, KvVictimIsTheKeyFurthestOverItsShare) {
  using server::kv_victim;
  using H = server::KvHolder;
  // One key: the newest stoppable sequence newer than the requester, else the requester itself.
  EXPECT_EQ(kv_victim({H{"a", 100, true}, H{"a", 100, true}, H{"a", 10, true}}, 0),
            std::optional<size_t>(2));
  EXPECT_EQ(kv_victim({H{"a", 100, true}, H{"a", 100, true}}, 1), std::optional<size_t>(1));
  // Key a holds 3000 of 3100 tokens: its newest goes, even though b's request is the newest.
  EXPECT_EQ(kv_victim({H{"a", 1000, true}, H{"a", 2000, true}, H{"b", 100, true}}, 2),
            std::optional<size_t>(1));
  // b is the one over its share: b's request fails itself rather than stop a's.
  EXPECT_EQ(kv_victim({H{"a", 100, true}, H{"b", 900, true}, H{"b", 50, true}}, 2),
            std::optional<size_t>(2));
}

// The arrival times of a stream's chunks, while it runs on its own thread.
class TimedStream {
 public:
  TimedStream(int port, const ojson& body, const std::string& key) : client_("127.0.0.1", port) {
    client_.set_read_timeout(120, 0);
    thread_ = std::thread([this, body, key] {
      httplib::Request r;
      r.method = "POST";
      r.path = "/v1/completions";
      r.body = body.dump();
      r.set_header("Authorization", "Bearer " + key);
      r.content_receiver = [this](const char* d, size_t n, uint64_t, uint64_t) {
        const std::string chunk(d, n);
        std::lock_guard<std::mutex> lock(mu_);
        body_ += chunk;
        for (size_t at = 0; (at = chunk.find("\"text\"", at)) != std::string::npos; ++at)
          times_.push_back(Clock::now());
        return true;
      };
      client_.send(r);
    });
    for (int i = 0; i < 2000 && tokens() < 3; ++i) std::this_thread::sleep_for(5ms);
  }
  ~TimedStream() {
    client_.stop();
    join();
  }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  std::string body() {
    std::lock_guard<std::mutex> lock(mu_);
    return body_;
  }
  size_t tokens() {
    std::lock_guard<std::mutex> lock(mu_);
    return times_.size();
  }
  // Chunks that arrived strictly inside (from, to).
  int between(Clock::time_point from, Clock::time_point to) {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (auto t : times_) n += t > from && t < to;
    return n;
  }

 private:
  httplib::Client client_;
  std::mutex mu_;
  std::vector<Clock::time_point> times_;
  std::string body_;
  std::thread thread_;
};

std::string long_text(int lines) {
  std::string text;
  for (int i = 0; i < lines; ++i)
    text += "def f" + std::to_string(i) + "(x):\n    return x * " + std::to_string(i) + "\n";
  return text;
}

// A session create of thousands of tokens, and an exact quarantine of its first token (which
// replays all the rest), are read in --prefill-chunk pieces between the other streams' decode
// steps: another key's stream keeps receiving tokens all along.
TEST(SessionWork, CreateAndQuarantineDoNotStallOtherStreams) {
  ServerSetup setup;
  setup.ctx = 4096;
  ServerProcess server("--parallel 4 --prefill-chunk 16", setup);
  ASSERT_NE(server.port(), 0);
  TimedStream other(server.port(),
                    {{"model", "pycoder-6m"},
                     {"prompt", "import os\n"},
                     {"max_tokens", 3000},
                     {"ignore_eos", true},
                     {"stream", true}},
                    "key-b");
  ASSERT_GE(other.tokens(), 3u);
  const std::string text = long_text(210);
  auto t0 = Clock::now();
  const HttpReply created = post_json(server.port(), "/v1/fak/sessions", ojson{{"text", text}});
  auto t1 = Clock::now();
  ASSERT_EQ(created.status, 201) << created.body;
  ASSERT_GT(created.j()["size"].get<int>(), 3000);
  const int during_create = other.between(t0 + 20ms, t1 - 20ms);
  EXPECT_GE(during_create, 20) << "the other stream got " << during_create << " tokens in "
                               << std::chrono::duration<double>(t1 - t0).count() << " s";
  const std::string base = "/v1/fak/sessions/" + created.j()["id"].get<std::string>();
  t0 = Clock::now();
  const HttpReply q =
      post_json(server.port(), base + "/quarantine", ojson{{"begin", 0}, {"end", 1}});
  t1 = Clock::now();
  ASSERT_EQ(q.status, 200) << q.body;
  EXPECT_GT(q.j()["tokens_recomputed"].get<int>(), 3000);
  const int during_quarantine = other.between(t0 + 20ms, t1 - 20ms);
  EXPECT_GE(during_quarantine, 20) << "the other stream got " << during_quarantine << " tokens";
  // The replay is exact: the session equals one created without the token.
  ojson tokens = get_json(server.port(), base).j()["tokens"];
  const HttpReply fresh = post_json(server.port(), "/v1/fak/sessions", ojson{{"ids", tokens}});
  ASSERT_EQ(fresh.status, 201) << fresh.body;
  const ojson gen = {{"max_tokens", 8}, {"ignore_eos", true}};
  EXPECT_EQ(post_json(server.port(), base + "/generate", gen).j()["ids"],
            post_json(server.port(),
                      "/v1/fak/sessions/" + fresh.j()["id"].get<std::string>() + "/generate", gen)
                .j()["ids"]);
}

// Each key reads its share of every step's prompt budget: another key's short request is
// answered while a long session create is still being read.
TEST(SessionWork, AnotherKeysPromptIsReadBesideALongCreate) {
  ServerSetup setup;
  setup.ctx = 4096;
  ServerProcess server("--parallel 4 --prefill-chunk 16", setup);
  ASSERT_NE(server.port(), 0);
  std::atomic<bool> created{false};
  Clock::time_point create_done;
  std::thread create([&] {
    const HttpReply r =
        post_json(server.port(), "/v1/fak/sessions", ojson{{"text", long_text(210)}});
    create_done = Clock::now();
    created = r.status == 201;
  });
  // Wait until the create is being read (it holds a batch slot).
  for (int i = 0; i < 2000; ++i) {
    if (get_json(server.port(), "/health").j()["active"].get<int>() > 0) break;
    std::this_thread::sleep_for(2ms);
  }
  const HttpReply b = post_json(server.port(), "/v1/completions",
                                ojson{{"model", "pycoder-6m"},
                                      {"prompt", long_text(12)},
                                      {"max_tokens", 4},
                                      {"ignore_eos", true}},
                                bearer("key-b"));
  const auto b_done = Clock::now();
  create.join();
  ASSERT_EQ(b.status, 200) << b.body;
  ASSERT_TRUE(created);
  EXPECT_LT(b_done, create_done) << "key-b waited for key-a's whole create";
}

// One key filling --max-queue does not lock the others out: a second key's request takes the
// place of the first key's newest queued one, and is served next.
TEST(QueueFairness, AnotherKeyGetsInAndIsServedNext) {
  ServerSetup setup;
  setup.ctx = 4096;
  ServerProcess server("--parallel 1 --max-queue 4", setup);
  ASSERT_NE(server.port(), 0);
  auto queued = [&] { return get_json(server.port(), "/health").j()["queued"].get<int>(); };
  LongStream busy(server.port(), 100000);  // key-a holds the only slot
  ASSERT_TRUE(busy.started());
  const ojson req = {
      {"model", "pycoder-6m"}, {"prompt", "def g():"}, {"max_tokens", 30}, {"ignore_eos", true}};
  std::mutex mu;
  std::vector<std::pair<int, Clock::time_point>> a_done;
  std::vector<std::thread> a;
  for (int i = 0; i < 4; ++i) {
    a.emplace_back([&] {
      const HttpReply r = post_json(server.port(), "/v1/completions", req);
      std::lock_guard<std::mutex> lock(mu);
      a_done.emplace_back(r.status, Clock::now());
    });
    for (int k = 0; k < 400 && queued() < i + 1; ++k) std::this_thread::sleep_for(5ms);
  }
  ASSERT_EQ(queued(), 4);
  // The queue is full of key-a's requests; key-a's fifth is refused as before.
  EXPECT_EQ(post_json(server.port(), "/v1/completions", req).status, 429);
  HttpReply b;
  Clock::time_point b_done;
  std::thread tb([&] {
    b = post_json(server.port(), "/v1/completions", req, bearer("key-b"));
    b_done = Clock::now();
  });
  for (int k = 0; k < 400; ++k) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!a_done.empty()) break;  // one of key-a's gave way
    }
    std::this_thread::sleep_for(5ms);
  }
  busy.stop();
  tb.join();
  for (auto& t : a) t.join();
  ASSERT_EQ(b.status, 200) << b.body;
  int refused = 0;
  for (const auto& [status, when] : a_done) {
    if (status == 429) {
      ++refused;
      continue;
    }
    EXPECT_EQ(status, 200);
    EXPECT_LT(b_done, when) << "key-b's request waited behind key-a's";
  }
  EXPECT_EQ(refused, 1);
}

// KV memory runs out while two keys decode (2 MiB holds 448 tokens): the key holding the most
// beyond an equal share gives way, not the newest request. Before, key-b's request, being the
// newest, was the one stopped, however much key-a held.
TEST(KvFairness, TheKeyHoldingTheMostGivesWay) {
  ServerProcess server("--parallel 2 --kv-mem 2 --kv-type f32 --kraw");  // 4608 bytes a token
  ASSERT_NE(server.port(), 0);
  auto prompt = [](const std::string& name) {
    std::string p;
    for (int i = 0; i < 6; ++i) p += "def " + name + std::to_string(i) + "(x):\n    return x\n";
    return p;
  };
  TimedStream a(server.port(),
                {{"model", "pycoder-6m"},
                 {"prompt", prompt("alpha")},
                 {"max_tokens", 370},
                 {"ignore_eos", true},
                 {"stream", true}},
                "key-a");
  for (int i = 0; i < 3000 && a.tokens() < 100; ++i) std::this_thread::sleep_for(2ms);
  ASSERT_GE(a.tokens(), 100u);
  ASSERT_LT(a.tokens(), 360u) << "key-a's request ran too fast to be caught";
  const HttpReply b = post_json(server.port(), "/v1/completions",
                                ojson{{"model", "pycoder-6m"},
                                      {"prompt", prompt("beta")},
                                      {"max_tokens", 200},
                                      {"ignore_eos", true}},
                                bearer("key-b"));
  a.join();
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(b.j()["usage"]["completion_tokens"], 200);
  const std::string a_body = a.body();
  // Stopped by key-b's need, or failed at its own next block: either way key-a's gave way.
  EXPECT_NE(a_body.find("KV memory budget spent"), std::string::npos)
      << a_body.substr(a_body.size() > 400 ? a_body.size() - 400 : 0);
  EXPECT_EQ(a_body.find("\"finish_reason\":\"length\""), std::string::npos);
}

}  // namespace
}  // namespace fak::test
