// Quantised matmul throughput: a 4864 x 896 weight (Qwen2.5-0.5B's ffn up/gate) times 1 token
// (decode, GB/s of weights) and 128 tokens (prefill, GMAC/s), with and without the tiled kernels;
// and a few tokens against a weight too big for the caches.
//   OMP_NUM_THREADS=1 ./build/matmul_quant_bench
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "ops/matmul.h"
#include "ops/matmul_kernels.h"
#include "quant/quant.h"
#include "weight_bytes.h"

namespace fak {
namespace {

void bench_matmul(benchmark::State& state, WType type, int n_tokens, bool tiles,
                  int64_t rows = 4864, bool packed = false, int64_t wide_cols = 0) {
  // Rows of 256-element super-blocks (the K-quants, iq4_xs) are 1024 long.
  const int64_t cols = wide_cols ? wide_cols : wtype_block(type) == 256 ? 1024 : 896;
  const QuantType qt = *wtype_quant(type);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(size_t(cols) * size_t(std::max(n_tokens, 1)));
  for (float& v : x) v = dist(rng);
  const size_t rb = row_bytes(qt, cols);
  // 64-byte aligned, as a model's weights are in memory (malloc's large blocks start 16 bytes into
  // a page, which puts every panel block's loads across cache lines).
  WeightBytes storage(rb * size_t(rows) + 64);
  const std::span<uint8_t> w(
      storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64), rb * size_t(rows));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = dist(rng);
    quantize_row(qt, row.data(), w.data() + size_t(r) * rb, cols);
  }
  WeightMatrix m{type, w.data(), rows, cols, rb};
  // As a model read into memory has them: packed once into the VNNI panels (where it can be).
  if (packed && !pack_weight_panels(m, w.data())) {
    state.SkipWithError("this type or CPU has no packed panels");
    return;
  }
  std::vector<float> y(size_t(rows) * size_t(n_tokens));
  kernels::set_quant_tiles_enabled(tiles);
  for (auto _ : state) {
    matmul(m, x.data(), n_tokens, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  kernels::set_quant_tiles_enabled(true);
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(w.size()));
  state.counters["GMAC/s"] =
      benchmark::Counter(double(state.iterations()) * double(rows) * double(cols) * n_tokens / 1e9,
                         benchmark::Counter::kIsRate);
}

#define FAK_MM(type)                                                                \
  BENCHMARK_CAPTURE(bench_matmul, type##_decode, WType::type, 1, true);             \
  BENCHMARK_CAPTURE(bench_matmul, type##_prefill128_tiled, WType::type, 128, true); \
  BENCHMARK_CAPTURE(bench_matmul, type##_prefill128_vecdot, WType::type, 128, false);

FAK_MM(Q8_0)
FAK_MM(Q4_0)
FAK_MM(Q5_0)
FAK_MM(Q4_K)
FAK_MM(Q6_K)
FAK_MM(Q5_1)
FAK_MM(MXFP4)
FAK_MM(Q2_K)
FAK_MM(Q3_K)
FAK_MM(IQ4_XS)
FAK_MM(IQ4_NL)

// The same weights packed at load (pack_weight_panels), 1 and 128 tokens.
#define FAK_PACKED(type)                                                                   \
  BENCHMARK_CAPTURE(bench_matmul, type##_decode_packed, WType::type, 1, true, 4864, true); \
  BENCHMARK_CAPTURE(bench_matmul, type##_prefill128_packed, WType::type, 128, true, 4864, true);
FAK_PACKED(Q8_0)
FAK_PACKED(Q4_0)
FAK_PACKED(Q5_0)
FAK_PACKED(Q5_1)
FAK_PACKED(Q4_K)
FAK_PACKED(Q5_K)
FAK_PACKED(Q6_K)
FAK_PACKED(MXFP4)
FAK_PACKED(Q2_K)
FAK_PACKED(Q3_K)
FAK_PACKED(IQ4_XS)
FAK_PACKED(IQ4_NL)

// Rows of 4096 (GLM-4.5-Air's hidden size): a 16-row group's panel and a tile's activations no
// longer fit L1 together, as they do at 896.
BENCHMARK_CAPTURE(bench_matmul, Q8_0_prefill128_packed_4096cols, WType::Q8_0, 128, true, 1024, true,
                  4096);
BENCHMARK_CAPTURE(bench_matmul, Q4_K_prefill128_packed_4096cols, WType::Q4_K, 128, true, 1024, true,
                  4096);
// GLM-4.5-Air's query and output projections over a 512-token prompt (34% of its Q8_0 cut's
// pp512): with 2 threads, against the 1024-row case, what the model's own shapes cost.
BENCHMARK_CAPTURE(bench_matmul, Q8_0_pp512_packed_12288x4096, WType::Q8_0, 512, true, 12288, true,
                  4096)
    ->UseRealTime();
BENCHMARK_CAPTURE(bench_matmul, Q8_0_pp512_packed_4096x12288, WType::Q8_0, 512, true, 4096, true,
                  12288)
    ->UseRealTime();

// A MoE expert's share of a prefill: 768 rows (Qwen3-30B-A3B's expert width) packed at load, 12
// and 26 tokens (a 512-token prompt over 128 or 256 experts, 8 routed: 16-32 tokens each): the
// tokens past whole tiles of 16 go to a padded AMX tile from kAmxFewestTokens, else to VNNI.
#define FAK_EXPERT(type, n) \
  BENCHMARK_CAPTURE(bench_matmul, type##_expert_##n##tok_packed, WType::type, n, true, 768, true);
FAK_EXPERT(Q8_0, 12)
FAK_EXPERT(Q8_0, 26)
FAK_EXPERT(Q4_K, 12)
FAK_EXPERT(Q4_K, 16)
FAK_EXPERT(Q4_K, 20)
FAK_EXPERT(Q4_K, 26)

// A few tokens against 131072 rows (119 MB of Q8_0) streamed from memory: batched decode and
// continuous batching's mixed steps (see gemv_max_tokens in ops/matmul_quant.cpp for which kernel).
#define FAK_FEW(type, n) \
  BENCHMARK_CAPTURE(bench_matmul, type##_streamed_##n##tok, WType::type, n, true, 131072);
FAK_FEW(Q8_0, 5)
FAK_FEW(Q4_0, 1)
FAK_FEW(MXFP4, 1)
FAK_FEW(Q8_0, 9)
FAK_FEW(Q8_0, 16)
// Decode of the low-bit types from memory, beside Q4_K's rows, as stored (a model mapped from its
// file) and packed (loaded into memory).
FAK_FEW(Q4_K, 1)
FAK_FEW(Q2_K, 1)
FAK_FEW(Q3_K, 1)
FAK_FEW(IQ4_XS, 1)
FAK_FEW(IQ4_NL, 1)
#define FAK_FEW_PACKED(type, n)                                                                  \
  BENCHMARK_CAPTURE(bench_matmul, type##_streamed_##n##tok_packed, WType::type, n, true, 131072, \
                    true);
FAK_FEW_PACKED(Q8_0, 5)
FAK_FEW_PACKED(Q8_0, 9)
FAK_FEW_PACKED(Q8_0, 16)
FAK_FEW(Q5_0, 5)
FAK_FEW(Q5_0, 9)
FAK_FEW(Q5_0, 16)
FAK_FEW_PACKED(Q5_0, 5)
FAK_FEW_PACKED(Q5_0, 9)
FAK_FEW_PACKED(Q5_0, 16)
// Decode as a model loaded into memory does it: one token against packed weights from memory.
FAK_FEW_PACKED(Q8_0, 1)
FAK_FEW_PACKED(Q4_K, 1)
FAK_FEW_PACKED(Q6_K, 1)
FAK_FEW_PACKED(MXFP4, 1)
FAK_FEW_PACKED(Q2_K, 1)
FAK_FEW_PACKED(Q3_K, 1)
FAK_FEW_PACKED(IQ4_XS, 1)
FAK_FEW_PACKED(IQ4_NL, 1)
FAK_FEW_PACKED(Q3_K, 2)
FAK_FEW_PACKED(Q3_K, 3)
FAK_FEW_PACKED(Q3_K, 4)
FAK_FEW_PACKED(Q2_K, 3)
FAK_FEW_PACKED(Q2_K, 4)
FAK_FEW_PACKED(IQ4_XS, 3)
FAK_FEW_PACKED(IQ4_XS, 4)
FAK_FEW_PACKED(Q4_K, 2)
FAK_FEW_PACKED(Q6_K, 2)
FAK_FEW_PACKED(Q6_K, 4)
FAK_FEW_PACKED(Q6_K, 8)
FAK_FEW_PACKED(Q4_K, 4)
FAK_FEW_PACKED(Q4_K, 8)
FAK_FEW_PACKED(Q8_0, 8)
// n matrices of rows x cols in one 64-byte aligned allocation, packed at load as a model's are:
// the first `distinct` quantised from random weights, the rest copies of them in turn (quantising
// hundreds of MiB would take most of a benchmark's time, and memory reads the same bytes at the
// same speed). Empty where the type or CPU has no packed panels.
struct MatrixPool {
  WeightBytes storage;
  std::vector<WeightMatrix> m;
};
std::unique_ptr<MatrixPool> make_pool(WType type, int64_t rows, int64_t cols, int64_t n,
                                      int64_t distinct) {
  const QuantType qt = *wtype_quant(type);
  const size_t rb = row_bytes(qt, cols), matrix_bytes = rb * size_t(rows);
  auto pool =
      std::make_unique<MatrixPool>(MatrixPool{WeightBytes(matrix_bytes * size_t(n) + 64), {}});
  uint8_t* base =
      pool->storage.data() + (64 - reinterpret_cast<uintptr_t>(pool->storage.data()) % 64);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t e = 0; e < n; ++e) {
    uint8_t* w = base + size_t(e) * matrix_bytes;
    if (e >= distinct) {
      const WeightMatrix& from = pool->m[size_t(e % distinct)];
      std::memcpy(w, from.data, matrix_bytes);
      pool->m.push_back(from);
      pool->m.back().data = w;
      continue;
    }
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : row) v = dist(rng);
      quantize_row(qt, row.data(), w + size_t(r) * rb, cols);
    }
    pool->m.push_back({type, w, rows, cols, rb});
    if (!pack_weight_panels(pool->m.back(), w)) return nullptr;
  }
  return pool;
}

// One token through a MoE layer's chosen experts, as decode runs them: 8 of 128 experts' gate and
// up projections (2048 columns, 768 rows each: Qwen3-30B-A3B's shape) in one matmul_many call,
// packed, each call the next 8 of the pool, so an expert is read again only after the whole pool
// (1 GiB or more): every call reads from memory. (Routing 8 experts 13 apart, one further each
// call, as until session 37, read each expert again 13 calls later, 120 MB on: from this Xeon's
// 480 MiB L3, faster than the probe reads memory.)
// Against membw_bench's pool row it says what many short matrices cost. (Not against
// Q8_0_streamed_1tok_packed: that rereads one 119 MB matrix, which partly streams from the cache.)
void bench_moe_experts(benchmark::State& state, WType type, int64_t kRows = 768, int64_t kUsed = 8,
                       int64_t kCols = 2048) {
  const QuantType qt = *wtype_quant(type);
  const size_t rb = row_bytes(qt, kCols), matrix_bytes = rb * size_t(kRows);
  // 128 experts of 768 rows, or more: at least 1 GiB in all, so no call finds its experts in the
  // cache (a few hundred MiB read again and again partly stream from it; see membw_bench).
  const int64_t kExperts =
      std::max<int64_t>(128 * 768 / kRows, int64_t((size_t(1) << 30) / (2 * matrix_bytes)) + 1);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(kCols));
  for (float& v : x) v = dist(rng);
  const auto pool = make_pool(type, kRows, kCols, 2 * kExperts, 2);
  if (!pool) {
    state.SkipWithError("this type or CPU has no packed panels");
    return;
  }
  const std::vector<WeightMatrix>& m = pool->m;
  std::vector<float> y(size_t(2 * kUsed * kRows));
  std::vector<MatmulJob> jobs;
  int64_t first = 0;
  for (auto _ : state) {
    jobs.clear();
    for (int64_t i = 0; i < kUsed; ++i) {
      const int64_t e = (first + i) % kExperts;
      // Gates and ups in two tensors, as GGUF files hold them (a gate's end is not the up's start).
      for (int64_t p = 0; p < 2; ++p)
        jobs.push_back(
            {&m[size_t(e + p * kExperts)], x.data(), 1, y.data() + size_t(2 * i + p) * kRows});
    }
    matmul_many(jobs);
    benchmark::DoNotOptimize(y.data());
    first = (first + kUsed) % kExperts;
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(2 * kUsed) * int64_t(matrix_bytes));
}
BENCHMARK_CAPTURE(bench_moe_experts, Q8_0_gate_up_8_of_128, WType::Q8_0)->UseRealTime();
BENCHMARK_CAPTURE(bench_moe_experts, Q4_K_gate_up_8_of_128, WType::Q4_K)->UseRealTime();
BENCHMARK_CAPTURE(bench_moe_experts, Q3_K_gate_up_8_of_128, WType::Q3_K)->UseRealTime();
BENCHMARK_CAPTURE(bench_moe_experts, Q2_K_gate_up_8_of_128, WType::Q2_K)->UseRealTime();
BENCHMARK_CAPTURE(bench_moe_experts, IQ4_XS_gate_up_8_of_128, WType::IQ4_XS)->UseRealTime();
BENCHMARK_CAPTURE(bench_moe_experts, Q8_0_x1536_4, WType::Q8_0, 1536, 4)->UseRealTime();
BENCHMARK_CAPTURE(bench_moe_experts, Q8_0_x3072_2, WType::Q8_0, 3072, 2)->UseRealTime();
BENCHMARK_CAPTURE(bench_moe_experts, Q8_0_x6144_1, WType::Q8_0, 6144, 1)->UseRealTime();
// Long matrices of each decode type, from memory (a pool of 768 MiB or more, as above):
// against membw_bench's pool row, the share of the host's read rate each decode kernel reaches.
BENCHMARK_CAPTURE(bench_moe_experts, Q4_K_x6144_1, WType::Q4_K, 6144, 1)->UseRealTime();
BENCHMARK_CAPTURE(bench_moe_experts, Q6_K_x6144_1, WType::Q6_K, 6144, 1)->UseRealTime();
// Qwen3.5-35B-A3B's experts as llama-quantize's Q4_K_M writes them: gate and up Q4_K (512 x
// 2048), down Q6_K (2048 x 512, two blocks a row; here in pairs of two experts' downs).
BENCHMARK_CAPTURE(bench_moe_experts, Q4_K_512x2048_8, WType::Q4_K, 512, 8)->UseRealTime();
BENCHMARK_CAPTURE(bench_moe_experts, Q6_K_2048x512_4, WType::Q6_K, 2048, 4, 512)->UseRealTime();

// A prefill's experts: 32 experts' gate and up (512 x 2048 each, Qwen3.5-35B-A3B's shape) in one
// matmul_many call, each over the same `n` tokens (a 512-token prompt over 256 experts, 8 routed:
// ~16 each), packed, from a pool of 768 MiB or more so every call streams its weights from memory:
// against membw_bench's pool row, how much of the host's read rate a prefill's experts reach.
// FAK_BENCH_POOL=N: N matrices instead (2: from the caches, the kernel's own rate). One Xeon, 2
// threads, Q8_0 16 tokens: 16.5 GB/s from memory (the probe 24.6) against 35 from the caches;
// software prefetch distances of 8-32 KB, prefetching into L1 as well, a page's first lines only,
// or the weights copied by vector loads before the tile loads: level or worse.
void bench_moe_prefill(benchmark::State& state, WType type, int n_tokens, int64_t kRows = 512,
                       int64_t kCols = 2048) {
  const int64_t kUsed = 32;
  const QuantType qt = *wtype_quant(type);
  const size_t rb = row_bytes(qt, kCols), matrix_bytes = rb * size_t(kRows);
  const char* pool_size = std::getenv("FAK_BENCH_POOL");
  const int64_t kMatrices = pool_size ? std::max(1, std::atoi(pool_size))
                                      : int64_t((size_t(768) << 20) / matrix_bytes) + 1;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(size_t(kCols) * size_t(n_tokens));
  for (float& v : x) v = dist(rng);
  const auto pool = make_pool(type, kRows, kCols, kMatrices, 1);
  if (!pool) {
    state.SkipWithError("this type or CPU has no packed panels");
    return;
  }
  const std::vector<WeightMatrix>& m = pool->m;
  std::vector<float> y(size_t(2 * kUsed * kRows) * size_t(n_tokens));
  std::vector<MatmulJob> jobs;
  int64_t first = 0;
  for (auto _ : state) {
    jobs.clear();
    for (int64_t i = 0; i < 2 * kUsed; ++i)
      jobs.push_back({&m[size_t((first + i) % kMatrices)], x.data(), n_tokens,
                      y.data() + size_t(i * kRows) * size_t(n_tokens)});
    matmul_many(jobs);
    benchmark::DoNotOptimize(y.data());
    first = (first + 2 * kUsed) % kMatrices;
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(2 * kUsed) * int64_t(matrix_bytes));
  state.counters["GMAC/s"] = benchmark::Counter(
      double(state.iterations()) * double(2 * kUsed * kRows * kCols) * n_tokens / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(bench_moe_prefill, Q8_0_16tok, WType::Q8_0, 16)->UseRealTime();
BENCHMARK_CAPTURE(bench_moe_prefill, Q8_0_32tok, WType::Q8_0, 32)->UseRealTime();
BENCHMARK_CAPTURE(bench_moe_prefill, Q4_K_16tok, WType::Q4_K, 16)->UseRealTime();
BENCHMARK_CAPTURE(bench_moe_prefill, Q8_0_16tok_down, WType::Q8_0, 16, 2048, 512)->UseRealTime();

// 1-4 tokens of each type: where the decode kernel hands over to the panels.
#define FAK_FEW4(type) FAK_FEW(type, 1) FAK_FEW(type, 2) FAK_FEW(type, 3) FAK_FEW(type, 4)
FAK_FEW4(Q8_0)
FAK_FEW4(Q4_0)
FAK_FEW4(Q5_0)
FAK_FEW4(Q4_K)
FAK_FEW4(Q5_K)
FAK_FEW4(Q6_K)

}  // namespace
}  // namespace fak

BENCHMARK_MAIN();
