// exp(x) on 16 lanes: exp256 of attention_avx2.cpp lane for lane (the same operations, so the
// same bits). Include only from files compiled with AVX-512 (F/DQ).
#pragma once

#include <immintrin.h>

#include "core/isa_namespace.h"

// GCC 12's AVX-512 intrinsics trip -W(maybe-)uninitialized inside the headers (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace fak::kernels {
inline namespace FAK_ISA_NS {

// exp(r) for |r| <= ln2 / 2 once x = n ln2 + r (n = round(x / ln2)): the polynomial of both
// exps below, which returns n too.
__attribute__((always_inline)) inline __m512 exp512_reduced(__m512 x, __m512& n) {
  n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  return _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
}

__attribute__((always_inline)) inline __m512 exp512(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.33f);
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(88.37f));
  __m512 n;
  const __m512 p = exp512_reduced(x, n);
  const __m512i e =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(__mmask16(~underflow), p, _mm512_castsi512_ps(e));
}

// exp(x) for x <= 0 (a score minus its lane's max; -inf and anything under -87.33 give an exact
// 0): exp512's polynomial with the power of two applied by vscalefps in one step instead of four.
// Its own rounding: the AMX attention's (attention_amx_avx512.cpp), in every path of it alike.
__attribute__((always_inline)) inline __m512 exp512_nonpositive(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.33f);
  const __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ);
  __m512 n;
  const __m512 p = exp512_reduced(_mm512_max_ps(x, lo), n);
  return _mm512_maskz_scalef_ps(keep, p, n);
}

// Softmax numerators of keys [j0, j1) in place, for the 16 * NV lanes of each score row
// (s + j * lw), and their running sums in key order per lane: p = exp(score - max).
template <int NV>
[[gnu::always_inline]] inline void softmax_numerators(float* s, size_t lw, int j0, int j1,
                                                      const __m512* mx, __m512* sum) {
  for (int j = j0; j < j1; ++j)
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) {
      float* sj = s + size_t(j) * lw + 16 * v;
      const __m512 p = exp512(_mm512_sub_ps(_mm512_loadu_ps(sj), mx[v]));
      _mm512_storeu_ps(sj, p);
      sum[v] = _mm512_add_ps(sum[v], p);
    }
}

}  // namespace FAK_ISA_NS
}  // namespace fak::kernels

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
