// The delta rule's recurrent step (ops/deltanet_step.h) on one value head of the Qwen3.5 shapes
// (dk = dv = 128): a prefill of n tokens and a one-token decode step, for each kernel this CPU can
// run. Reports tokens per second for one head; x (value heads x DeltaNet layers) is its share of a
// model's token (Qwen3.5-0.8B: 16 x 18, 35B-A3B: 32 x 30).
//   ./build/deltanet_bench
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "ops/deltanet_step.h"
#include "ops/matmul_kernels.h"

namespace fak {
namespace {

constexpr int kDk = 128, kDv = 128;

void run(benchmark::State& st, DeltaStepFn fn, bool needs_avx512) {
  if (needs_avx512 && !kernels::avx512_enabled()) {
    st.SkipWithError("no AVX-512");
    return;
  }
  const int n = int(st.range(0));
  // Rows as deltanet_core lays them out: q | k | v per token, stride qkv.
  const size_t stride = 2 * kDk + kDv;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 0.1f);
  const size_t N = static_cast<size_t>(n);
  std::vector<float> rows(N * stride), beta(N), g(N), out(N * kDv), S(size_t(kDk) * kDv, 0.0f);
  for (float& x : rows) x = dist(rng);
  for (int t = 0; t < n; ++t) beta[size_t(t)] = 0.5f, g[size_t(t)] = -0.05f;
  const DeltaHeadRows r{rows.data(), rows.data() + kDk, rows.data() + 2 * kDk,
                        stride,      beta.data(),       g.data(),
                        1,           out.data(),        kDv};
  for (auto _ : st) {
    fn(S.data(), kDk, kDv, r, n);
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["tok/s"] =
      benchmark::Counter(double(n), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_CAPTURE(run, ref, delta_step_ref, false)->Arg(1)->Arg(512);
BENCHMARK_CAPTURE(run, avx2, delta_step_avx2(), false)->Arg(1)->Arg(512);
BENCHMARK_CAPTURE(run, avx512, delta_step_avx512(), true)->Arg(1)->Arg(512);

}  // namespace
}  // namespace fak

BENCHMARK_MAIN();
