// GeGLU's activation: PyTorch's gelu(approximate="tanh"), the one Gemma's checkpoints name
// (gelu_pytorch_tanh). Element-wise with libm's tanhf: the same bits on every thread count.
#include <cmath>

#include "ops/elementwise.h"
#include "ops/ops.h"

namespace fak {

void gelu_tanh_mul(const float* gate, const float* up, int n, float* out) {
  // sqrt(2 / pi) and the cubic term's coefficient, as PyTorch's kernel writes them.
  const float kBeta = float(M_SQRT2 * M_2_SQRTPI * 0.5);
  const float kKappa = 0.044715f;
  for_each_element(n, [&](int i) {
    const float x = gate[i];
    const float inner = kBeta * (x + kKappa * x * x * x);
    out[i] = 0.5f * x * (1.0f + std::tanh(inner)) * up[i];
  });
}

}  // namespace fak
