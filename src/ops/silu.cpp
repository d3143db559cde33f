#include <algorithm>

#include "ops/ops.h"
#include "ops/vec.h"

namespace fak {

void silu_mul(const float* gate, const float* up, int n, float* out) {
  const auto kernel = vec_kernels().silu_mul;
  // A prefill's MLP has T x 4864 of these: split over the threads in cache-sized chunks.
  constexpr int kChunk = 16 * 1024;
  const int chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int c = 0; c < chunks; ++c) {
    const int i = c * kChunk;
    kernel(gate + i, up + i, std::min(kChunk, n - i), out + i);
  }
}

}  // namespace fak
