// Matrix-vector throughput of every quantized vec_dot: a 1024 x 4096 weight matrix dotted with one
// quantized activation row, reported as GB/s of weight bytes read (decode is bandwidth-bound, so
// this is the number that compares with memory bandwidth and with llama.cpp's kernels).
//   ./build/quant_bench --benchmark_filter=avx2
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "quant/quant.h"

namespace fak {
namespace {

constexpr int64_t kCols = 4096;
constexpr int64_t kRows = 1024;

void bench_dot(benchmark::State& state, const QuantKernels* k, QuantType t) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(kCols * kRows);
  for (float& v : x) v = dist(rng);
  const size_t rb = row_bytes(t, kCols);
  std::vector<uint8_t> w(rb * kRows);
  for (int64_t r = 0; r < kRows; ++r)
    quantize_row(t, x.data() + r * kCols, w.data() + r * rb, kCols);
  const QuantType at = dot_activation_type(t);
  std::vector<uint8_t> act(row_bytes(at, kCols));
  k->quantize_act(at)(x.data(), act.data(), kCols);
  std::vector<float> y(kRows);
  const VecDotFn dot = k->vec_dot(t);
  for (auto _ : state) {
    for (int64_t r = 0; r < kRows; ++r) y[r] = dot(kCols, w.data() + r * rb, act.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(w.size()));
  state.counters["weight_MiB"] = double(w.size()) / (1 << 20);
}

void bench_quantize_act(benchmark::State& state, const QuantKernels* k, QuantType at) {
  std::vector<float> x(kCols, 0.5f);
  std::vector<uint8_t> act(row_bytes(at, kCols));
  for (auto _ : state) {
    k->quantize_act(at)(x.data(), act.data(), kCols);
    benchmark::DoNotOptimize(act.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * kCols * 4);
}

int register_all() {
  for (const QuantKernelVariant& v : quant_kernel_variants()) {
    if (!v.supported) {
      std::printf("skipped %s: this CPU lacks it\n", std::string(v.kernels->isa).c_str());
      continue;
    }
    for (QuantType t : all_quant_types()) {
      const std::string name =
          "vec_dot/" + std::string(v.kernels->isa) + "/" + std::string(quant_type_name(t));
      benchmark::RegisterBenchmark(name.c_str(), bench_dot, v.kernels, t);
    }
    for (QuantType at : {QuantType::Q8_0, QuantType::Q8_K}) {
      const std::string name =
          "quantize_act/" + std::string(v.kernels->isa) + "/" + std::string(quant_type_name(at));
      benchmark::RegisterBenchmark(name.c_str(), bench_quantize_act, v.kernels, at);
    }
  }
  return 0;
}

const int registered = register_all();

}  // namespace
}  // namespace fak

BENCHMARK_MAIN();
