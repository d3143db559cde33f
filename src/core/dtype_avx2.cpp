// The f16 / bf16 row conversions of dtype.h, eight elements at a time (compiled with AVX2 + F16C;
// dtype.cpp calls them only where the CPU has both).
#include <immintrin.h>

#include "core/dtype.h"

namespace fak {

namespace {

// Whole groups of 8 by `eight`, then the last few through a zero-padded group: no scalar tail, so
// nothing here calls dtype.h's inline conversions (a copy of those compiled for AVX2 could be the
// one the linker keeps for every caller).
template <class Eight>
void by_eights(const float* x, int n, uint16_t* out, Eight eight) {
  int i = 0;
  for (; i + 8 <= n; i += 8) eight(x + i, out + i);
  if (i == n) return;
  float pad[8] = {};
  uint16_t res[8];
  for (int k = 0; k < n - i; ++k) pad[k] = x[i + k];
  eight(pad, res);
  for (int k = 0; k < n - i; ++k) out[i + k] = res[k];
}

}  // namespace

// F16C's conversion rounds to nearest even as f32_to_f16 does; only a NaN's payload differs, so
// NaN lanes take f32_to_f16's quiet NaN (sign | 0x7e00).
void f32_to_f16_row_avx2(const float* x, int n, uint16_t* out) {
  const __m256i sign = _mm256_set1_epi32(int(0x80000000u));
  by_eights(x, n, out, [&](const float* xi, uint16_t* oi) {
    const __m256 v = _mm256_loadu_ps(xi);
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256i quiet =
        _mm256_or_si256(_mm256_srli_epi32(_mm256_and_si256(_mm256_castps_si256(v), sign), 16),
                        _mm256_set1_epi32(0x7e00));
    // The NaN lanes' quiet NaNs as 16-bit words, in the lanes cvtps_ph put its words in.
    const __m128i q16 =
        _mm_packus_epi32(_mm256_castsi256_si128(quiet), _mm256_extracti128_si256(quiet, 1));
    const __m128i n16 =
        _mm_packs_epi32(_mm256_castsi256_si128(nan), _mm256_extracti128_si256(nan, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(oi), _mm_blendv_epi8(h, q16, n16));
  });
}

// f32_to_bf16's rounding (add 0x7fff plus the kept lsb, keep the top half) in 8 lanes, NaNs made
// quiet by setting bit 6 of the kept half as it does.
void f32_to_bf16_row_avx2(const float* x, int n, uint16_t* out) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  by_eights(x, n, out, [&](const float* xi, uint16_t* oi) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xi));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(b, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, abs_mask), inf);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0x40));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
    const __m128i packed =
        _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(oi), packed);
  });
}

}  // namespace fak
