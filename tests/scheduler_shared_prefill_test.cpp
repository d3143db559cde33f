// Prompts read at the same time share their common start (server/scheduler_admit.cpp): agents
// fanned out with one long system prompt send it together, before any of it is in the prefix
// cache. The scheduler reads it once; each other request clones that session where its prompt
// parts and reads only its own rest. Checked against each prompt served alone, in a scheduler of
// its own: the same greedy tokens, on a dense model, a hybrid (recurrent state carried by the
// clone) and a sliding-window model (rows dropped behind the leader while others share them).
// The requests are queued while the scheduler thread is held in a job, so all of them are admitted
// in one step whatever the machine's load: the test's verdict never depends on timing.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "models/model.h"
#include "server/scheduler.h"
#include "test_util.h"

namespace fak::server {
namespace {

struct Outcome {
  std::vector<int32_t> tokens;
  int cached = -1;  // the last Started event's cached tokens (what the client's usage says)
  std::string end;  // the finish reason, or the error
};

GenRequest request(const std::vector<int32_t>& prompt, const std::string& partition) {
  GenRequest r;
  r.partition = partition;
  r.tenant = "t";
  r.prompt = prompt;
  r.max_tokens = 12;
  r.stream = std::make_shared<GenStream>();
  return r;
}

Outcome collect(GenStream& stream) {
  Outcome o;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (o.end.empty() && std::chrono::steady_clock::now() < deadline) {
    for (const GenEvent& e : stream.wait(std::chrono::milliseconds(200))) {
      if (e.kind == GenEvent::Kind::Started) o.cached = e.cached_tokens;
      if (e.kind == GenEvent::Kind::Token) o.tokens.push_back(e.token);
      if (e.kind == GenEvent::Kind::Done || e.kind == GenEvent::Kind::Error) o.end = e.text;
    }
  }
  return o;
}

SchedulerOptions options() {
  SchedulerOptions o;
  o.parallel = 5;
  o.ctx = 512;
  o.prefill_chunk = 16;  // the leader reads the shared start over many steps
  return o;
}

// Every prompt submitted while the scheduler thread is busy, so one step admits them all.
std::vector<Outcome> together(Scheduler& s, const std::vector<std::vector<int32_t>>& prompts,
                              int max_tokens = 12) {
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, release = false;
  std::thread holder([&] {
    s.run_job([&] {
      std::unique_lock<std::mutex> lock(mu);
      entered = true;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    });
  });
  std::vector<std::shared_ptr<GenStream>> streams;
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return entered; });
    for (const auto& p : prompts) {
      GenRequest r = request(p, "shared");
      r.max_tokens = max_tokens;
      streams.push_back(r.stream);
      s.submit(std::move(r));
    }
    release = true;
  }
  cv.notify_all();
  holder.join();
  std::vector<Outcome> out;
  for (auto& st : streams) out.push_back(collect(*st));
  return out;
}

// The same prompt in a scheduler of its own: nothing to share.
Outcome alone(const std::shared_ptr<const Model>& model, const std::vector<int32_t>& prompt) {
  Scheduler s(model, options(), nullptr);
  GenRequest r = request(prompt, "alone");
  auto stream = r.stream;
  s.submit(std::move(r));
  Outcome o = collect(*stream);
  s.shutdown();
  return o;
}

class SharedPrefill : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string where = GetParam();
    model = Model::load(where == "pycoder-6m" ? test::source_path("models/pycoder-6m")
                                              : test::data_path("oracle/" + where),
                        {.load_tokenizer = false});
  }
  std::shared_ptr<const Model> model;
};

TEST_P(SharedPrefill, RequestsReadTheirCommonStartOnceAndAnswerAsAlone) {
  const int vocab = std::min(model->config().vocab, 4000);
  const auto system = test::random_ids(200, vocab, 7);
  std::vector<std::vector<int32_t>> prompts;
  for (uint32_t agent = 0; agent < 3; ++agent)  // the same 200 tokens, then each agent's own
    prompts.push_back(test::cat(system, test::random_ids(20 + 7 * int(agent), vocab, 100 + agent)));
  // One that parts from the others at token 120, and one that shares nothing.
  prompts.push_back(
      test::cat({system.begin(), system.begin() + 120}, test::random_ids(30, vocab, 9)));
  prompts.push_back(test::random_ids(90, vocab, 11));

  Scheduler s(model, options(), nullptr);
  const std::vector<Outcome> got = together(s, prompts);
  s.shutdown();

  const std::vector<int> cached = {0, 200, 200, 120, 0};
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Outcome want = alone(model, prompts[i]);
    ASSERT_EQ(want.end, "length");
    ASSERT_EQ(want.tokens.size(), 12u);
    EXPECT_EQ(got[i].end, "length") << "request " << i;
    EXPECT_EQ(got[i].tokens, want.tokens) << "request " << i;
    EXPECT_EQ(got[i].cached, cached[i]) << "request " << i;
  }
}

// A request that arrives while another with the same start decodes its reply finds that start in
// the prefix cache: a prompt goes there as soon as it is read, not when its request ends.
TEST_P(SharedPrefill, APromptIsCachedAsSoonAsItIsRead) {
  const int vocab = std::min(model->config().vocab, 4000);
  // The second extends the first's whole prompt (on a hybrid, the cache restarts at a recurrent
  // state checkpoint: the end of the first's prompt is one).
  const auto first = test::random_ids(160, vocab, 21);
  const auto second = test::cat(first, test::random_ids(25, vocab, 23));
  Scheduler s(model, options(), nullptr);
  GenRequest r = request(first, "shared");
  r.max_tokens = 400;  // still decoding when the second arrives
  auto stream = r.stream;
  s.submit(std::move(r));
  bool decoding = false;
  while (!decoding)
    for (const GenEvent& e : stream->wait(std::chrono::milliseconds(200)))
      decoding |= e.kind == GenEvent::Kind::Token;
  const Outcome got = together(s, {second}).front();
  stream->cancel();
  s.shutdown();
  const Outcome want = alone(model, second);
  ASSERT_EQ(want.tokens.size(), 12u);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.cached, 160);
}

INSTANTIATE_TEST_SUITE_P(Models, SharedPrefill,
                         ::testing::Values("pycoder-6m", "qwen35-hybrid-tiny", "gemma3-tiny"),
                         [](const auto& i) { return test::fixture_name(i.param); });

}  // namespace
}  // namespace fak::server
