// One batched decode step of a real model at agentbench's context: A agents cloned from a shared
// prefix of P tokens, each with O tokens of its own, decode one token each (then truncate back,
// untimed, so every iteration sees the same context): arm (c)'s step at 5 agents, arm (b)'s at 1.
// Needs a model:
//   FAK_BENCH_MODEL=/tmp/models/q05-bf16 ./build/decode_step_bench
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "models/model.h"
#include "memory/kv_cache.h"
#include "runtime/session.h"

namespace fak {
namespace {

constexpr int kPrefix = 2048, kOwn = 950;

struct Agents {
  std::shared_ptr<const Model> model;
  std::shared_ptr<KvCache> cache;
  std::vector<Session> sessions;     // each agent's own tokens appended in one go
  std::vector<Session> interleaved;  // own tokens appended as arm (c) does: a turn's worth of
                                     // every agent at a time, so their blocks interleave
};

// Built once per process (prefilling takes seconds) for the largest agent count asked for.
Agents* agents() {
  static std::unique_ptr<Agents> a = [] {
    const char* path = std::getenv("FAK_BENCH_MODEL");
    if (!path) return std::unique_ptr<Agents>();
    auto x = std::make_unique<Agents>();
    x->model = Model::load(path, LoadOptions{});
    const ModelConfig& c = x->model->config();
    KvCacheOptions o;
    o.dtype = DType::F16;
    x->cache =
        std::make_shared<KvCache>(x->model->n_attention_layers(), c.n_kv_heads, c.head_dim, o);
    std::mt19937 rng(3);
    auto tokens = [&](int n) {
      std::vector<int32_t> v(static_cast<size_t>(n));
      for (auto& t : v) t = int32_t(rng() % uint32_t(c.vocab));
      return v;
    };
    Session base(x->model, x->cache);
    base.append(tokens(kPrefix));
    for (int i = 0; i < 5; ++i) {
      x->sessions.push_back(base.clone());
      x->sessions.back().append(tokens(kOwn));
    }
    for (int i = 0; i < 5; ++i) x->interleaved.push_back(base.clone());
    std::vector<Session*> ptrs;
    for (Session& s : x->interleaved) ptrs.push_back(&s);
    constexpr int kTurnTokens = 96;  // agentbench: 64 tool-result tokens and 32 decoded a turn
    for (int done = 0; done < kOwn; done += kTurnTokens) {
      const int n = kOwn - done < kTurnTokens ? kOwn - done : kTurnTokens;
      std::vector<std::vector<int32_t>> chunk;
      std::vector<std::span<const int32_t>> spans;
      for (int i = 0; i < 5; ++i) chunk.push_back(tokens(n));
      for (const auto& c : chunk) spans.emplace_back(c);
      append_batch(ptrs, spans);
    }
    return x;
  }();
  return a.get();
}

void bench_decode_step(benchmark::State& state) {
  Agents* a = agents();
  if (!a) {
    state.SkipWithError("set FAK_BENCH_MODEL to a model directory or GGUF file");
    return;
  }
  const int n = int(state.range(0));
  std::vector<Session>& set = state.range(1) ? a->interleaved : a->sessions;
  std::vector<Session*> ptrs;
  for (int i = 0; i < n; ++i) ptrs.push_back(&set[size_t(i)]);
  std::vector<int32_t> next(size_t(n), 1);
  // A turn's worth of steps per iteration, as agentbench decodes D = 32 tokens: the truncation
  // after them recomputes each agent's last kept token, so it is kept rare and out of the timing
  // (and out of a profile's samples).
  constexpr int kStepsPerTurn = 32;
  for (auto _ : state) {
    for (int step = 0; step < kStepsPerTurn; ++step) decode_batch(ptrs, next);
    state.PauseTiming();
    for (Session* s : ptrs) s->truncate(kPrefix + kOwn);
    state.ResumeTiming();
  }
  state.counters["ms_per_step"] =
      benchmark::Counter(double(state.iterations()) * kStepsPerTurn * 1e3,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

BENCHMARK(bench_decode_step)
    ->ArgNames({"agents", "interleaved"})
    ->Args({1, 0})
    ->Args({5, 0})
    ->Args({5, 1})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);

}  // namespace
}  // namespace fak

BENCHMARK_MAIN();
