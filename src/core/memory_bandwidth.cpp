#include "core/memory_bandwidth.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/anon_memory.h"
#include "core/cpu_features.h"

namespace fak {

namespace {

// Four independent sums of 32-byte loads: enough loads in flight to stream, few enough
// instructions that the loop is never the limit.
__attribute__((target("avx2"))) float sum_avx2(const char* p, size_t bytes) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= bytes; i += 128) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(reinterpret_cast<const float*>(p + i)));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(reinterpret_cast<const float*>(p + i + 32)));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(reinterpret_cast<const float*>(p + i + 64)));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(reinterpret_cast<const float*>(p + i + 96)));
  }
  alignas(32) float t[8];
  _mm256_store_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

float sum_scalar(const char* p, size_t bytes) {
  uint64_t a[4] = {0, 0, 0, 0};
  for (size_t i = 0; i + 32 <= bytes; i += 32)
    for (int k = 0; k < 4; ++k) {
      uint64_t v;
      std::memcpy(&v, p + i + 8 * size_t(k), 8);
      a[k] += v;
    }
  return float(a[0] ^ a[1] ^ a[2] ^ a[3]);
}

}  // namespace

double measure_read_bandwidth(size_t pool_bytes, size_t pass_bytes, int reps) {
  pass_bytes = std::max<size_t>(pass_bytes / 4096 * 4096, 4096);
  const size_t passes_in_pool = std::max<size_t>(pool_bytes / pass_bytes, 1);
  AnonMemory buf(passes_in_pool * pass_bytes, "the memory bandwidth probe");
  // Written in full so every page is faulted in. The reads start from the pool's start, written
  // longest ago: what the write left in the cache (its end) is read last, long evicted by then.
  std::memset(buf.data(), 1, passes_in_pool * pass_bytes);
  const bool avx2 = cpu_features().avx2;
  std::vector<double> rates;
  volatile float sink = 0;
  for (int r = 0; r <= std::max(reps, 1); ++r) {
    const char* base =
        reinterpret_cast<const char*>(buf.data()) + size_t(r) % passes_in_pool * pass_bytes;
    const auto t0 = std::chrono::steady_clock::now();
    float total = 0;
#pragma omp parallel reduction(+ : total)
    {
      const size_t per = pass_bytes / size_t(omp_get_num_threads()) / 128 * 128;
      const char* p = base + per * size_t(omp_get_thread_num());
      total += avx2 ? sum_avx2(p, per) : sum_scalar(p, per);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink = sink + total;
    if (r > 0) rates.push_back(double(pass_bytes) / s / 1e9);  // pass 0 only warms up
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

size_t probe_pool_bytes(size_t available) {
  constexpr size_t kPool = size_t(512) << 20, kLeft = size_t(1) << 30;
  if (available != 0 && available < kPool + kLeft) return 0;
  return kPool;
}

}  // namespace fak
