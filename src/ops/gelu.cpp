// GeGLU's activation: PyTorch's gelu(approximate="tanh"), the one Gemma's checkpoints name
// (gelu_pytorch_tanh), through the vector kernels (vec.h gelu_mul: x sigma(2u), the same exp as
// SiLU; libm's tanhf took a sixth of a Gemma prefill). Element-wise: the same bits on every thread
// count and ISA.
#include <algorithm>

#include "ops/ops.h"
#include "ops/vec.h"

namespace fak {

void gelu_tanh_mul(const float* gate, const float* up, int n, float* out) {
  const auto kernel = vec_kernels().gelu_mul;
  constexpr int kChunk = 16 * 1024;
  const int chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int c = 0; c < chunks; ++c) {
    const int i = c * kChunk;
    kernel(gate + i, up + i, std::min(kChunk, n - i), out + i);
  }
}

}  // namespace fak
