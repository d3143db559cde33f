// gpt-oss's expert activation, as transformers' GptOssExperts writes it:
//   g = min(gate, limit), u = clamp(up, -limit, limit), out = (u + 1) * g * sigmoid(alpha g).
// Element-wise with libm's expf: the same bits on every thread count.
#include <algorithm>
#include <cmath>

#include "ops/elementwise.h"
#include "ops/ops.h"

namespace fak {

void clamped_swiglu_mul(const float* gate, const float* up, int n, float alpha, float limit,
                        float* out) {
  for_each_element(n, [&](int i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    out[i] = (u + 1.0f) * (g / (1.0f + std::exp(-alpha * g)));
  });
}

}  // namespace fak
