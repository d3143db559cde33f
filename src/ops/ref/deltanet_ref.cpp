// The delta rule's recurrent step, scalar: the reference the vector kernels reproduce bit for bit
// (ops/deltanet_step.h says why they can).
#include <cmath>
#include <vector>

#include "ops/deltanet_step.h"

namespace fak {

void delta_step_columns(float* S, int dk, int dv, const DeltaHeadRows& r, int n, int c0, int c1) {
  const int w = c1 - c0;
  if (w <= 0 || n <= 0) return;
  thread_local std::vector<float> scratch;
  scratch.assign(size_t(2 * w), 0.0f);
  float* kv = scratch.data();         // [w]
  float* delta = scratch.data() + w;  // [w]: the previous token's update, once it is known
  for (int t = 0; t <= n; ++t) {
    // One pass over the rows finishes token t - 1 (its update and output) and starts token t
    // (the decay and what the memory predicts for k_t).
    const bool prev = t > 0, cur = t < n;
    const float* kp = prev ? r.k + size_t(t - 1) * r.qkv_stride : nullptr;
    const float* qp = prev ? r.q + size_t(t - 1) * r.qkv_stride : nullptr;
    float* op = prev ? r.out + size_t(t - 1) * r.out_stride + c0 : nullptr;
    const float* kt = cur ? r.k + size_t(t) * r.qkv_stride : nullptr;
    const float decay = cur ? float(std::exp(double(r.g[size_t(t) * r.gb_stride]))) : 0.0f;
    if (prev)
      for (int d = 0; d < w; ++d) op[d] = 0.0f;
    for (int d = 0; d < w; ++d) kv[d] = 0.0f;
    for (int kk = 0; kk < dk; ++kk) {
      float* row = S + size_t(kk) * size_t(dv) + c0;
      for (int d = 0; d < w; ++d) {
        float x = row[d];
        if (prev) {
          x = std::fma(kp[kk], delta[d], x);
          op[d] = std::fma(qp[kk], x, op[d]);
        }
        if (cur) {
          x *= decay;
          kv[d] = std::fma(kt[kk], x, kv[d]);
        }
        row[d] = x;
      }
    }
    if (cur) {
      const float beta = r.beta[size_t(t) * r.gb_stride];
      const float* v = r.v + size_t(t) * r.qkv_stride + c0;
      for (int d = 0; d < w; ++d) delta[d] = beta * (v[d] - kv[d]);
    }
  }
}

void delta_step_ref(float* S, int dk, int dv, const DeltaHeadRows& r, int n) {
  delta_step_columns(S, dk, dv, r, n, 0, dv);
}

}  // namespace fak
