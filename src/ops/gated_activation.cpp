// The gated MLPs' activations, out = act(gate) * up, over whole arrays: SwiGLU, GeGLU and gpt-oss's
// clamped SwiGLU through the vector kernels (ops/vec.h: the same exp, the same bits on every ISA).
// The arrays are split over the threads (ops/elementwise.h); no result depends on the split.
#include <algorithm>
#include <cmath>

#include "ops/elementwise.h"
#include "ops/ops.h"
#include "ops/vec.h"

namespace fak {

void silu_mul(const float* gate, const float* up, int n, float* out) {
  const auto kernel = vec_kernels().silu_mul;
  for_each_chunk(n, [&](int b, int e) { kernel(gate + b, up + b, e - b, out + b); });
}

// PyTorch's gelu(approximate="tanh"), the one Gemma's checkpoints name (gelu_pytorch_tanh), as
// x sigma(2u) (vec.h gelu_mul): libm's tanhf took a sixth of a Gemma prefill.
void gelu_tanh_mul(const float* gate, const float* up, int n, float* out) {
  const auto kernel = vec_kernels().gelu_mul;
  for_each_chunk(n, [&](int b, int e) { kernel(gate + b, up + b, e - b, out + b); });
}

void sigmoid_mul(float* x, const float* gate, int n) {
  const auto kernel = vec_kernels().sigmoid_mul;
  for_each_chunk(n, [&](int b, int e) { kernel(x + b, gate + b, e - b); });
}

// gpt-oss's experts, as transformers' GptOssExperts writes it:
//   g = min(gate, limit), u = clamp(up, -limit, limit), out = (u + 1) * g * sigmoid(alpha g),
// through the vector kernels' exp (libm's expf, element by element, was 4.6% of a gpt-oss pp512).
void clamped_swiglu_mul(const float* gate, const float* up, int n, float alpha, float limit,
                        float* out) {
  const auto kernel = vec_kernels().clamped_swiglu_mul;
  for_each_chunk(n, [&](int b, int e) { kernel(gate + b, up + b, e - b, alpha, limit, out + b); });
}

}  // namespace fak
