// The delta rule's recurrent step with AVX2: strips of 16 columns of S (8 KiB at dk = 128, so a
// strip stays in L1 across a call's tokens), the reference's operations per element
// (ops/deltanet_step.h), so the same bits.
#include <immintrin.h>

#include <cmath>

#include "ops/deltanet_step.h"

namespace fak {

namespace {

// One pass over the strip's rows: finishes the previous token (Prev: its update with kp and delta,
// its output with qp into o) and starts the current one (Cur: the decay, then kv += kt row).
// note: Prev and Cur are template arguments and the column loop is unrolled, so kv, o and delta
// live in registers; with runtime flags GCC kept them on the stack and every FMA went through a
// store and a reload (3x slower, deltanet_bench).
template <int NV, bool Prev, bool Cur>
[[gnu::always_inline]] inline void pass(float* S, int dk, int dv, int c0, const float* kp,
                                        const float* qp, const float* kt, __m256 decay,
                                        const __m256 (&delta)[NV], __m256 (&kv)[NV],
                                        __m256 (&o)[NV]) {
  for (int kk = 0; kk < dk; ++kk) {
    float* row = S + size_t(kk) * size_t(dv) + c0;
    __m256 kpb = _mm256_setzero_ps(), qpb = _mm256_setzero_ps(), ktb = _mm256_setzero_ps();
    if constexpr (Prev) kpb = _mm256_set1_ps(kp[kk]), qpb = _mm256_set1_ps(qp[kk]);
    if constexpr (Cur) ktb = _mm256_set1_ps(kt[kk]);
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) {
      __m256 x = _mm256_loadu_ps(row + 8 * j);
      if constexpr (Prev) {
        x = _mm256_fmadd_ps(kpb, delta[j], x);
        o[j] = _mm256_fmadd_ps(qpb, x, o[j]);
      }
      if constexpr (Cur) {
        x = _mm256_mul_ps(x, decay);
        kv[j] = _mm256_fmadd_ps(ktb, x, kv[j]);
      }
      _mm256_storeu_ps(row + 8 * j, x);
    }
  }
}

// Columns [c0, c0 + 8 NV) over the n tokens.
template <int NV>
void strip(float* S, int dk, int dv, const DeltaHeadRows& r, int n, int c0) {
  __m256 kv[NV], delta[NV], o[NV];
#pragma GCC unroll 8
  for (int j = 0; j < NV; ++j) delta[j] = _mm256_setzero_ps();
  for (int t = 0; t <= n; ++t) {
    const bool prev = t > 0, cur = t < n;
    const float* kp = prev ? r.k + size_t(t - 1) * r.qkv_stride : nullptr;
    const float* qp = prev ? r.q + size_t(t - 1) * r.qkv_stride : nullptr;
    const float* kt = cur ? r.k + size_t(t) * r.qkv_stride : nullptr;
    const __m256 decay =
        _mm256_set1_ps(cur ? float(std::exp(double(r.g[size_t(t) * r.gb_stride]))) : 0.0f);
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) kv[j] = o[j] = _mm256_setzero_ps();
    if (prev && cur)
      pass<NV, true, true>(S, dk, dv, c0, kp, qp, kt, decay, delta, kv, o);
    else if (prev)
      pass<NV, true, false>(S, dk, dv, c0, kp, qp, kt, decay, delta, kv, o);
    else
      pass<NV, false, true>(S, dk, dv, c0, kp, qp, kt, decay, delta, kv, o);
    if (prev) {
      float* op = r.out + size_t(t - 1) * r.out_stride + c0;
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) _mm256_storeu_ps(op + 8 * j, o[j]);
    }
    if (cur) {
      const __m256 beta = _mm256_set1_ps(r.beta[size_t(t) * r.gb_stride]);
      const float* v = r.v + size_t(t) * r.qkv_stride + c0;
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j)
        delta[j] = _mm256_mul_ps(beta, _mm256_sub_ps(_mm256_loadu_ps(v + 8 * j), kv[j]));
    }
  }
}

void step(float* S, int dk, int dv, const DeltaHeadRows& r, int n) {
  if (n <= 0) return;
  int c = 0;
  for (; c + 16 <= dv; c += 16) strip<2>(S, dk, dv, r, n, c);
  for (; c + 8 <= dv; c += 8) strip<1>(S, dk, dv, r, n, c);
  delta_step_columns(S, dk, dv, r, n, c, dv);
}

}  // namespace

DeltaStepFn delta_step_avx2() {
  return step;
}

}  // namespace fak
