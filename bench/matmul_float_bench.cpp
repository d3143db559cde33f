// Float-weight matmul throughput on Qwen2.5-0.5B's matrix shapes: 256 tokens (prefill, GFLOP/s
// against the CPU's FMA peak) and 1 token (decode, GB/s of weights).
//   ./build/matmul_float_bench [--benchmark_filter=bf16]
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <omp.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/avx512_warnings.h"  // first: before the intrinsics headers
#include "core/dtype.h"
#include "ops/matmul.h"
#include "weight_bytes.h"

namespace fak {
namespace {

void bench_float(benchmark::State& state, WType type, int64_t rows, int64_t cols, int n_tokens) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(size_t(cols) * size_t(n_tokens));
  for (float& v : x) v = dist(rng);
  const size_t elem = type == WType::F32 ? 4 : 2;
  WeightBytes w(size_t(rows) * size_t(cols) * elem);
  for (size_t i = 0; i < size_t(rows) * size_t(cols); ++i) {
    const float v = 0.05f * dist(rng);
    if (type == WType::F32) {
      std::memcpy(&w[4 * i], &v, 4);
    } else {
      const uint16_t h = type == WType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
      std::memcpy(&w[2 * i], &h, 2);
    }
  }
  WeightMatrix m{type, w.data(), rows, cols, size_t(cols) * elem};
  std::vector<float> y(size_t(rows) * size_t(n_tokens));
  for (auto _ : state) {
    matmul(m, x.data(), n_tokens, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(w.size()));
  state.counters["GFLOP/s"] = benchmark::Counter(
      double(state.iterations()) * 2.0 * double(rows) * double(cols) * n_tokens / 1e9,
      benchmark::Counter::kIsRate);
}

// kCopies copies of one random rows x cols matrix of f16 or bf16 weights, one after another (532
// MiB for the 0.5B's FFN up): a benchmark reading them in turn reads every call's from memory.
constexpr int kCopies = 64;
WeightBytes streamed_pool(WType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const size_t one = size_t(rows) * size_t(cols) * 2;
  WeightBytes w(one * kCopies);
  for (size_t i = 0; i < size_t(rows) * size_t(cols); ++i) {
    const float v = 0.05f * dist(rng);
    const uint16_t h = type == WType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
    std::memcpy(&w[2 * i], &h, 2);
  }
  for (int c = 1; c < kCopies; ++c) std::memcpy(&w[one * size_t(c)], w.data(), one);
  return w;
}

// The same product over `copies` copies of the matrix in turn (hundreds of MB), so every call reads
// its weights from memory as a model's prefill does, not from the cache the copy above sits in.
void bench_float_streamed(benchmark::State& state, WType type, int64_t rows, int64_t cols,
                          int n_tokens, bool bf16_act) {
  if (bf16_act && !bf16_activations_available()) {
    state.SkipWithError("this CPU has no AVX512-BF16");
    return;
  }
  set_bf16_activations(bf16_act);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(size_t(cols) * size_t(n_tokens));
  for (float& v : x) v = dist(rng);
  const size_t elem = 2;  // f16 or bf16
  const size_t one = size_t(rows) * size_t(cols) * elem;
  const WeightBytes w = streamed_pool(type, rows, cols, rng);
  std::vector<float> y(size_t(rows) * size_t(n_tokens));
  int c = 0;
  for (auto _ : state) {
    WeightMatrix m{type, w.data() + one * size_t(c), rows, cols, size_t(cols) * elem};
    matmul(m, x.data(), n_tokens, y.data());
    benchmark::DoNotOptimize(y.data());
    c = (c + 1) % kCopies;
  }
  set_bf16_activations(false);
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(one));
  state.counters["GFLOP/s"] = benchmark::Counter(
      double(state.iterations()) * 2.0 * double(rows) * double(cols) * n_tokens / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(bench_float_streamed, f16_up_4864x896_pp256, WType::F16, 4864, 896, 256, false);
BENCHMARK_CAPTURE(bench_float_streamed, f16_down_896x4864_pp256, WType::F16, 896, 4864, 256, false);
BENCHMARK_CAPTURE(bench_float_streamed, bf16act_up_4864x896_pp256, WType::BF16, 4864, 896, 256,
                  true);
BENCHMARK_CAPTURE(bench_float_streamed, bf16act_down_896x4864_pp256, WType::BF16, 896, 4864, 256,
                  true);
// One token, as decode reads a 0.5B model's FFN matrix: from memory, not from the cache (against
// membw_bench's pool row, the share of the host's read rate the decode kernels reach).
BENCHMARK_CAPTURE(bench_float_streamed, f16_up_4864x896_tg, WType::F16, 4864, 896, 1, false)
    ->UseRealTime();
BENCHMARK_CAPTURE(bench_float_streamed, bf16_up_4864x896_tg, WType::BF16, 4864, 896, 1, false)
    ->UseRealTime();
BENCHMARK_CAPTURE(bench_float_streamed, bf16act_up_4864x896_tg, WType::BF16, 4864, 896, 1, true)
    ->UseRealTime();

// A candidate layout, not the engine's: one token against f16 weights stored as 16-row panels
// (per 8 columns, the 16 rows' 16 bytes in turn, so a 16-row group is one run of memory read front
// to back) instead of rows, the weights' bytes and arithmetic otherwise as in the decode kernel
// (per row one 8-lane chain of multiply-adds over k, here two rows to a register). Read from the
// same 532 MiB pool in turn as f16_up_4864x896_tg, it says what packing float weights at load
// would give decode; `prefetch` asks for the panel 4 KiB ahead as the quantised panels do.
__attribute__((target("avx512f,avx512vl,avx512dq,f16c,fma"))) void f16_panel_rows(
    const uint8_t* panels, int64_t cols, const float* x, float* y, int64_t g0, int64_t g1,
    bool prefetch) {
  const size_t group_bytes = 16 * size_t(cols) * 2;
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* p = panels + size_t(g) * group_bytes;
    __m512 acc[8];
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) acc[q] = _mm512_setzero_ps();
    for (int64_t k = 0; k < cols; k += 8, p += 256) {
      if (prefetch)
#pragma GCC unroll 4
        for (int l = 0; l < 4; ++l)
          _mm_prefetch(reinterpret_cast<const char*>(p + 4096 + 64 * l), _MM_HINT_T0);
      const __m512 xv = _mm512_broadcast_f32x8(_mm256_loadu_ps(x + k));
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q)
        acc[q] = _mm512_fmadd_ps(
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * q))), xv,
            acc[q]);
    }
    alignas(64) float lanes[16];
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      _mm512_store_ps(lanes, acc[q]);
      for (int h = 0; h < 2; ++h) {
        float t = 0;
        for (int i = 0; i < 8; ++i) t += lanes[8 * h + i];
        y[size_t(g) * 16 + size_t(2 * q + h)] = t;
      }
    }
  }
}

void bench_f16_panel_streamed(benchmark::State& state, int64_t rows, int64_t cols, bool prefetch) {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512dq")) {
    state.SkipWithError("this CPU has no AVX-512");
    return;
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(cols));
  for (float& v : x) v = dist(rng);
  const size_t one = size_t(rows) * size_t(cols) * 2;
  const WeightBytes w = streamed_pool(WType::F16, rows, cols, rng);
  std::vector<float> y(static_cast<size_t>(rows));
  const int64_t groups = rows / 16;
  int c = 0;
  for (auto _ : state) {
    const uint8_t* m = w.data() + one * size_t(c);
#pragma omp parallel
    {
      const int64_t n = omp_get_num_threads(), t = omp_get_thread_num();
      f16_panel_rows(m, cols, x.data(), y.data(), groups * t / n, groups * (t + 1) / n, prefetch);
    }
    benchmark::DoNotOptimize(y.data());
    c = (c + 1) % kCopies;
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(one));
}
BENCHMARK_CAPTURE(bench_f16_panel_streamed, f16_panel16_up_4864x896_tg, 4864, 896, false)
    ->UseRealTime();
BENCHMARK_CAPTURE(bench_f16_panel_streamed, f16_panel16_prefetch_up_4864x896_tg, 4864, 896, true)
    ->UseRealTime();

// BF16 weights on the bf16-activation path (AVX512-BF16's vdpbf16ps, ops/matmul.h).
void bench_bf16act(benchmark::State& state, int64_t rows, int64_t cols, int n_tokens) {
  if (!bf16_activations_available()) {
    state.SkipWithError("this CPU has no AVX512-BF16");
    return;
  }
  set_bf16_activations(true);
  bench_float(state, WType::BF16, rows, cols, n_tokens);
  set_bf16_activations(false);
}
BENCHMARK_CAPTURE(bench_bf16act, qo_896x896_pp256, 896, 896, 256);
BENCHMARK_CAPTURE(bench_bf16act, up_4864x896_pp256, 4864, 896, 256);
BENCHMARK_CAPTURE(bench_bf16act, down_896x4864_pp256, 896, 4864, 256);
BENCHMARK_CAPTURE(bench_bf16act, up_4864x896_tg, 4864, 896, 1);
BENCHMARK_CAPTURE(bench_bf16act, up_4864x896_batch5, 4864, 896, 5);
BENCHMARK_CAPTURE(bench_bf16act, lm_head_151936x896_tg, 151936, 896, 1);

#define FAK_FLOAT(name, type)                                                              \
  BENCHMARK_CAPTURE(bench_float, name##_qo_896x896_pp256, WType::type, 896, 896, 256);     \
  BENCHMARK_CAPTURE(bench_float, name##_up_4864x896_pp256, WType::type, 4864, 896, 256);   \
  BENCHMARK_CAPTURE(bench_float, name##_down_896x4864_pp256, WType::type, 896, 4864, 256); \
  BENCHMARK_CAPTURE(bench_float, name##_up_4864x896_tg, WType::type, 4864, 896, 1);        \
  BENCHMARK_CAPTURE(bench_float, name##_up_4864x896_batch5, WType::type, 4864, 896, 5);

FAK_FLOAT(bf16, BF16)
// The 0.5B model's lm_head (272 MB of bf16): streamed from memory, as every decode step does.
BENCHMARK_CAPTURE(bench_float, bf16_lm_head_151936x896_tg, WType::BF16, 151936, 896, 1);
BENCHMARK_CAPTURE(bench_float, bf16_lm_head_151936x896_batch5, WType::BF16, 151936, 896, 5);
// Mixed steps (decode tokens topped up with prompt chunks, as continuous batching runs them): a
// few dozen tokens against weights streamed from memory.
BENCHMARK_CAPTURE(bench_float, bf16_lm_head_151936x896_batch8, WType::BF16, 151936, 896, 8);
BENCHMARK_CAPTURE(bench_float, bf16_lm_head_151936x896_batch12, WType::BF16, 151936, 896, 12);
BENCHMARK_CAPTURE(bench_float, bf16_lm_head_151936x896_batch16, WType::BF16, 151936, 896, 16);
BENCHMARK_CAPTURE(bench_float, bf16_lm_head_151936x896_batch24, WType::BF16, 151936, 896, 24);
BENCHMARK_CAPTURE(bench_float, bf16_lm_head_151936x896_batch32, WType::BF16, 151936, 896, 32);
BENCHMARK_CAPTURE(bench_float, bf16_lm_head_151936x896_batch48, WType::BF16, 151936, 896, 48);
FAK_FLOAT(f16, F16)

}  // namespace
}  // namespace fak

BENCHMARK_MAIN();
