// Attention throughput on Qwen2.5-0.5B's shape (14 query heads, 2 KV heads, head_dim 64, 24
// layers, f32 KV in 32-row blocks) over agentbench's contexts: A agents cloned from a shared
// prefix of P rows, each with its own rows after it. One iteration runs all 24 layers, so the KV
// working set (hundreds of MB) comes from memory as it does in a real step.
//   ./build/attention_bench [--benchmark_filter=decode]
// FAK_BENCH_ONE_LAYER=1 runs layer 0 24 times instead: the same arithmetic on rows that stay in
// cache, which separates the kernel's compute from its memory traffic.
// Cases: decode steps of A agents batched (arm c) or of one agent alone (arm b), a batched
// tool-result prefill (A x R tokens) and one long prompt; one case on Qwen3-30B-A3B's shape.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "memory/kv_cache.h"
#include "ops/attention.h"

namespace fak {
namespace {

// The attention shape of a model's layers (all the same), and how many of them one step runs.
struct Shape {
  int layers, heads, kv_heads, head_dim;
};
constexpr Shape kQwen05{24, 14, 2, 64};
// Qwen3-30B-A3B's attention (32 query heads, 4 KV heads, head_dim 128) over the 6 layers of the
// cut that `fak bench -d 8192` runs against both peers.
constexpr Shape kQwen3Moe6{6, 32, 4, 128};

struct Workload {
  KvCache cache;
  std::vector<std::vector<int32_t>> tables;  // per agent
  std::vector<std::vector<float>> q, out;
  std::vector<AttentionTask> tasks;

  // `agents` sequences of prefix + own rows each; the last `new_tokens` rows of each are queries.
  Workload(const Shape& shape, int agents, int prefix, int own, int new_tokens, DType dtype)
      : cache(shape.layers, shape.kv_heads, shape.head_dim, KvCacheOptions{32, true, 0, dtype}) {
    std::mt19937 rng(11);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> row(size_t(shape.kv_heads * shape.head_dim));
    auto fill = [&](int32_t block) {
      for (int l = 0; l < shape.layers; ++l)
        for (KvPlane p : {KvPlane::K, KvPlane::V, KvPlane::Kraw})
          for (int s = 0; s < cache.block_size(); ++s) {
            for (float& v : row) v = dist(rng);
            cache.store_row(block, l, p, s, row.data());
          }
    };
    const int bs = cache.block_size();
    std::vector<int32_t> shared;
    for (int i = 0; i < prefix / bs; ++i) {
      shared.push_back(cache.allocate());
      fill(shared.back());
    }
    const int n = prefix / bs * bs + own;
    for (int a = 0; a < agents; ++a) {
      tables.push_back(shared);
      while (int(tables.back().size()) * bs < n) {
        tables.back().push_back(cache.allocate());
        fill(tables.back().back());
      }
      const size_t q_elems = size_t(new_tokens) * size_t(shape.heads * shape.head_dim);
      q.emplace_back(q_elems);
      for (float& v : q.back()) v = dist(rng);
      out.emplace_back(q_elems);
    }
    for (int a = 0; a < agents; ++a)
      tasks.push_back({q[size_t(a)].data(), out[size_t(a)].data(), &tables[size_t(a)], new_tokens,
                       n - new_tokens});
  }
};

void bench_attention_shape(benchmark::State& state, const Shape& m, int agents, int prefix, int own,
                           int new_tokens, DType dtype) {
  Workload w(m, agents, prefix, own, new_tokens, dtype);
  const AttentionShape shape{m.heads, m.kv_heads, m.head_dim, 1.0f / std::sqrt(float(m.head_dim))};
  const bool one_layer = std::getenv("FAK_BENCH_ONE_LAYER") != nullptr;
  for (auto _ : state)
    for (int l = 0; l < m.layers; ++l) attention(w.tasks, w.cache, one_layer ? 0 : l, shape);
  const int n = prefix + own;
  // Query-key pairs of all layers, causal within the new tokens.
  const double pairs =
      double(agents) * m.heads * m.layers *
      (double(new_tokens) * (n - new_tokens) + 0.5 * new_tokens * (new_tokens + 1));
  state.counters["GFLOP/s"] = benchmark::Counter(
      double(state.iterations()) * pairs * 4 * m.head_dim / 1e9, benchmark::Counter::kIsRate);
  state.counters["ms_per_step"] = benchmark::Counter(
      double(state.iterations()) * 1e3, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void bench_attention(benchmark::State& state, int agents, int prefix, int own, int new_tokens,
                     DType dtype) {
  bench_attention_shape(state, kQwen05, agents, prefix, own, new_tokens, dtype);
}

// agentbench A=5, P=2048, mid-run: ~950 rows of tool results and replies per agent.
BENCHMARK_CAPTURE(bench_attention, decode_5agents_3k, 5, 2048, 950, 1, DType::F32)
    ->Unit(benchmark::kMillisecond);
// Short contexts: the rows stay in L2, so these time the arithmetic alone.
BENCHMARK_CAPTURE(bench_attention, decode_5agents_l2, 5, 192, 64, 1, DType::F32)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(bench_attention, decode_5agents_l2_noshare, 5, 0, 256, 1, DType::F32)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(bench_attention, decode_1agent_3k, 1, 2048, 950, 1, DType::F32)
    ->Unit(benchmark::kMillisecond);
// One sequence at agentbench's and at a long agent's context, f16 KV (fak run, arm (b)).
BENCHMARK_CAPTURE(bench_attention, decode_1agent_3k_f16, 1, 2048, 950, 1, DType::F16)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bench_attention, decode_1agent_16k_f16, 1, 16384, 0, 1, DType::F16)
    ->Unit(benchmark::kMillisecond);
// The same with quantised KV (--kv-type q8_0 / q4_0): half and a quarter of the bytes, widened
// where they are read.
BENCHMARK_CAPTURE(bench_attention, decode_1agent_16k_q8_0, 1, 16384, 0, 1, DType::Q8_0)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bench_attention, decode_1agent_16k_q4_0, 1, 16384, 0, 1, DType::Q4_0)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bench_attention, decode_5agents_3k_f16, 5, 2048, 950, 1, DType::F16)
    ->Unit(benchmark::kMillisecond);
// The two kinds of keys in a batched step, apart: all shared (the prefix, one decode group), and
// all each agent's own (nothing shared, so each agent runs alone).
BENCHMARK_CAPTURE(bench_attention, decode_5agents_2k_shared_f16, 5, 2048, 1, 1, DType::F16)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bench_attention, decode_5agents_1k_own_f16, 5, 0, 1024, 1, DType::F16)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bench_attention, prefill_5x64_3k, 5, 2048, 950, 64, DType::F32)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bench_attention, prefill_5x64_3k_f16, 5, 2048, 950, 64, DType::F16)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bench_attention, prefill_1x2048, 1, 0, 2048, 2048, DType::F32)
    ->Unit(benchmark::kMillisecond);
// A pp512 at depth 8192 (fak bench -d): 512 queries over 8.7k f16 rows, the work that makes a long
// prompt's prefill slow.
BENCHMARK_CAPTURE(bench_attention, prefill_512_at_8k_f16, 1, 8192, 512, 512, DType::F16)
    ->Unit(benchmark::kMillisecond);
// One token's decode on Qwen3-30B-A3B's attention at depth 32,768 (f16 KV: 192 MiB of keys and
// values over the 6 layers, past L2 and most of L3, as a long agent context's step reads them).
BENCHMARK_CAPTURE(bench_attention_shape, decode_1agent_32k_f16_qwen3moe, kQwen3Moe6, 1, 32768, 0, 1,
                  DType::F16)
    ->Unit(benchmark::kMillisecond);
// The same on Qwen3-30B-A3B's attention (head_dim 128, 8 query heads a KV head): the pp512 at
// depth 8,192 of the 6-layer cut, three quarters of which is this.
BENCHMARK_CAPTURE(bench_attention_shape, prefill_512_at_8k_f16_qwen3moe, kQwen3Moe6, 1, 8192, 512,
                  512, DType::F16)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fak

BENCHMARK_MAIN();
