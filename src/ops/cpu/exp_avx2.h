// exp on 8 lanes, shared by the AVX2 kernels (attention, SiLU). exp_poly (ops/vec.h) is the same
// operations on one float, so a vector lane and a scalar tail give the same bits.
// Include only from files compiled with at least -mavx2 -mfma.
#pragma once

#include <immintrin.h>

#include "core/isa_namespace.h"

namespace fak::kernels {
inline namespace FAK_ISA_NS {

// exp(x) for a lane vector: Cody-Waite range reduction x = n ln2 + r, a degree-6 polynomial for
// e^r, then 2^n through the exponent bits. Relative error ~2e-7; exactly 0 below -87.33 (and for
// -inf, which is how masked keys arrive). Deterministic: the same input always gives the same bits.
[[gnu::always_inline]] inline __m256 exp256(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33f);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.37f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

}  // namespace FAK_ISA_NS
}  // namespace fak::kernels
