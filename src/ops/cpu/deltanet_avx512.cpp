// The delta rule's recurrent step with AVX-512: strips of 64 columns of S (32 KiB at dk = 128, so a
// strip stays in L1 across a call's tokens), the reference's operations per element
// (ops/deltanet_step.h), so the same bits.
#include <immintrin.h>

#include <cmath>
#include <cstring>

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
                                        const float* qp, const float* kt, __m512 decay,
                                        const __m512 (&delta)[NV], __m512 (&kv)[NV],
                                        __m512 (&o)[NV]) {
  for (int kk = 0; kk < dk; ++kk) {
    float* row = S + size_t(kk) * size_t(dv) + c0;
    __m512 kpb = _mm512_setzero_ps(), qpb = _mm512_setzero_ps(), ktb = _mm512_setzero_ps();
    if constexpr (Prev) kpb = _mm512_set1_ps(kp[kk]), qpb = _mm512_set1_ps(qp[kk]);
    if constexpr (Cur) ktb = _mm512_set1_ps(kt[kk]);
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) {
      __m512 x = _mm512_loadu_ps(row + 16 * j);
      if constexpr (Prev) {
        x = _mm512_fmadd_ps(kpb, delta[j], x);
        o[j] = _mm512_fmadd_ps(qpb, x, o[j]);
      }
      if constexpr (Cur) {
        x = _mm512_mul_ps(x, decay);
        kv[j] = _mm512_fmadd_ps(ktb, x, kv[j]);
      }
      _mm512_storeu_ps(row + 16 * j, x);
    }
  }
}

// Columns [c0, c0 + 16 NV) over the n tokens.
template <int NV>
void strip_in_place(float* S, int dk, int dv, const DeltaHeadRows& r, int n, int c0) {
  __m512 kv[NV], delta[NV], o[NV];
#pragma GCC unroll 8
  for (int j = 0; j < NV; ++j) delta[j] = _mm512_setzero_ps();
  for (int t = 0; t <= n; ++t) {
    const bool prev = t > 0, cur = t < n;
    const float* kp = prev ? r.k + size_t(t - 1) * r.qkv_stride : nullptr;
    const float* qp = prev ? r.q + size_t(t - 1) * r.qkv_stride : nullptr;
    const float* kt = cur ? r.k + size_t(t) * r.qkv_stride : nullptr;
    const __m512 decay =
        _mm512_set1_ps(cur ? float(std::exp(double(r.g[size_t(t) * r.gb_stride]))) : 0.0f);
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) kv[j] = o[j] = _mm512_setzero_ps();
    if (prev && cur)
      pass<NV, true, true>(S, dk, dv, c0, kp, qp, kt, decay, delta, kv, o);
    else if (prev)
      pass<NV, true, false>(S, dk, dv, c0, kp, qp, kt, decay, delta, kv, o);
    else
      pass<NV, false, true>(S, dk, dv, c0, kp, qp, kt, decay, delta, kv, o);
    if (prev) {
      float* op = r.out + size_t(t - 1) * r.out_stride + c0;
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) _mm512_storeu_ps(op + 16 * j, o[j]);
    }
    if (cur) {
      const __m512 beta = _mm512_set1_ps(r.beta[size_t(t) * r.gb_stride]);
      const float* v = r.v + size_t(t) * r.qkv_stride + c0;
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j)
        delta[j] = _mm512_mul_ps(beta, _mm512_sub_ps(_mm512_loadu_ps(v + 16 * j), kv[j]));
    }
  }
}

// The same through a copy of the strip with its rows contiguous: S's rows are dv floats apart
// (512 bytes at dv = 128), so a strip's dk rows fall on an eighth of L1's sets, 16 lines a set
// against 12 ways, and every token's pass over it missed L1; packed, its 32 KB take every set
// evenly. Same steps on the same values: the same bits.
template <int NV>
void strip(float* S, int dk, int dv, const DeltaHeadRows& r, int n, int c0) {
  constexpr int kW = 16 * NV;
  if (n < 4 || dk > 256) return strip_in_place<NV>(S, dk, dv, r, n, c0);
  alignas(64) float packed[256 * kW];
  for (int kk = 0; kk < dk; ++kk)
    std::memcpy(packed + kk * kW, S + size_t(kk) * size_t(dv) + c0, sizeof(float) * kW);
  DeltaHeadRows rp = r;
  rp.v += c0;
  rp.out += c0;
  strip_in_place<NV>(packed, dk, kW, rp, n, 0);
  for (int kk = 0; kk < dk; ++kk)
    std::memcpy(S + size_t(kk) * size_t(dv) + c0, packed + kk * kW, sizeof(float) * kW);
}

void step(float* S, int dk, int dv, const DeltaHeadRows& r, int n) {
  if (n <= 0) return;
  int c = 0;
  for (; c + 64 <= dv; c += 64) strip<4>(S, dk, dv, r, n, c);
  for (; c + 16 <= dv; c += 16) strip<1>(S, dk, dv, r, n, c);
  delta_step_columns(S, dk, dv, r, n, c, dv);
}

}  // namespace

DeltaStepFn delta_step_avx512() {
  return step;
}

}  // namespace fak
