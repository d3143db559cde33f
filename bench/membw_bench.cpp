// The host's memory read bandwidth right now: streaming sums split over the threads, of data in no
// cache and of one buffer read again and again.
// Decode is bound by this rate, and on a shared host it moves (29-80 GB/s seen in one session), so
// run it beside the engine's benchmarks to read them.
//   ./build/membw_bench
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <omp.h>

#include <cstring>

#include "core/anon_memory.h"

namespace fak {
namespace {

__attribute__((target("avx2"))) float sum_range(const char* p, size_t bytes, size_t step,
                                                size_t piece = 256) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 256 <= bytes; i += step)
    for (size_t l = 0; l < piece; l += 128) {
      a0 = _mm256_add_ps(a0, _mm256_loadu_ps(reinterpret_cast<const float*>(p + i + l)));
      a1 = _mm256_add_ps(a1, _mm256_loadu_ps(reinterpret_cast<const float*>(p + i + l + 32)));
      a2 = _mm256_add_ps(a2, _mm256_loadu_ps(reinterpret_cast<const float*>(p + i + l + 64)));
      a3 = _mm256_add_ps(a3, _mm256_loadu_ps(reinterpret_cast<const float*>(p + i + l + 96)));
    }
  alignas(32) float t[8];
  _mm256_store_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

// Each iteration reads the next `pass_mib` of a `pool_mib` buffer, in turn. pool == pass rereads
// one buffer; a pool well past the last-level cache reads data that is in no cache, as decode of a
// big model (or of MoE experts that change every token) does. Side by side they show how much a
// reread buffer streams from the cache (session 27: 128 MiB reread 60.0 GiB/s, 1 GiB in 128 MiB
// passes 50.7), which is why fak bench's probe reads a pool, never the same bytes twice. Run with
//   --benchmark_repetitions=8 --benchmark_enable_random_interleaving=true
// to compare the rows: the host's rate moves within seconds.
void bench_read(benchmark::State& state, size_t pool_mib, size_t pass_mib, size_t step) {
  const size_t pass = pass_mib << 20, passes = pool_mib / pass_mib;
  AnonMemory buf(pass * passes, "membw_bench");
  std::memset(buf.data(), 1, pass * passes);
  size_t next = 0;
  for (auto _ : state) {
    const char* base = reinterpret_cast<const char*>(buf.data()) + next * pass;
    next = (next + 1) % passes;
    float total = 0;
#pragma omp parallel reduction(+ : total)
    {
      const size_t per = pass / size_t(omp_get_num_threads());
      total += sum_range(base + per * size_t(omp_get_thread_num()), per, step);
    }
    benchmark::DoNotOptimize(total);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(pass / step * 256));
}

BENCHMARK_CAPTURE(bench_read, pool_1gib_pass_128mib, 1024, 128, 256)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(bench_read, reread_512mib, 512, 512, 256)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(bench_read, reread_256mib, 256, 256, 256)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(bench_read, reread_128mib, 128, 128, 256)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The pattern of two threads reading different KV heads of interleaved rows (the KV layout before
// session 5): thread t reads bytes [128t, 128t + 128) of every 256. It streamed half the rate of
// contiguous halves, which is why a block keeps each head's rows together.
void bench_interleaved(benchmark::State& state) {
  const size_t bytes = size_t(512) << 20;
  AnonMemory buf(bytes, "membw_bench");
  std::memset(buf.data(), 1, bytes);
  for (auto _ : state) {
    float total = 0;
#pragma omp parallel num_threads(2) reduction(+ : total)
    total +=
        sum_range(reinterpret_cast<const char*>(buf.data()) + 128 * size_t(omp_get_thread_num()),
                  bytes - 256, 256, 128);
    benchmark::DoNotOptimize(total);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));  // both threads' halves
}
BENCHMARK(bench_interleaved)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace fak

BENCHMARK_MAIN();
