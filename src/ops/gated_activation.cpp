// The gated MLPs' activations, out = act(gate) * up, over whole arrays: SwiGLU and GeGLU through
// the vector kernels (ops/vec.h: the same exp, the same bits on every ISA), gpt-oss's clamped
// SwiGLU element by element. The arrays are split over the threads (ops/elementwise.h); no result
// depends on the split.
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
// with libm's expf.
void clamped_swiglu_mul(const float* gate, const float* up, int n, float alpha, float limit,
                        float* out) {
  for_each_chunk(n, [&](int b, int e) {
    for (int i = b; i < e; ++i) {
      const float g = std::min(gate[i], limit);
      const float u = std::clamp(up[i], -limit, limit);
      out[i] = (u + 1.0f) * (g / (1.0f + std::exp(-alpha * g)));
    }
  });
}

}  // namespace fak
