// AVX2 integer sums of one low-bit super-block (q2_K, q3_K, iq4_xs) against one Q8_K activation
// block, as 8 int32 partial sums whose total is the block's exact integer sum of
// dot_lowbit_ref.cpp. The dot products (dot_lowbit_avx2.cpp) reduce them per row, the decode kernel
// (gemv_lowbit_avx2.cpp) 8 rows at once, so both start from the same integers. Include only from
// files compiled with -mavx2 -mfma -mf16c (*_avx2.cpp).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/avx2_common.h"
#include "quant/quant_blocks.h"

namespace fak::quant {
inline namespace FAK_ISA_NS {

// Shuffle mask for the 32 codes of group g (elements 32g..32g+31): 8 copies of byte 2g (the scale
// of the first 16) then 8 of byte 2g + 1, widened by cvtepu8/cvtepi8 to match maddubs' 16 lanes.
inline __m128i sub16_scale_mask(int g) {
  return _mm_set_epi64x(0x0101010101010101LL * (2 * g + 1), 0x0101010101010101LL * (2 * g));
}

// The 32 codes of group j of half h of a q2_K / q3_K super-block (elements 128h + 32j + m): the 2
// low bits of each qs byte at bits 2j.
inline __m256i low2_codes(__m256i qs_half, int j) {
  return _mm256_and_si256(_mm256_srli_epi16(qs_half, 2 * j), _mm256_set1_epi8(3));
}

// The 16 signed scales sc_k - 32 of a q3_K block (bytes 0..15), from 32-bit words (the same
// values as unpack_scales_q3_k): word w < 2 takes low nibbles, w >= 2 high nibbles of bytes
// 4 (w % 2)..+3, and the 2 high bits from bits 2w of bytes 8..11.
inline __m128i scales_q3_k(const uint8_t* packed) {
  uint32_t u[3];
  std::memcpy(u, packed, 12);
  constexpr uint32_t kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  const uint32_t s0 = (u[0] & kLow4) | ((u[2] & kLow2) << 4);
  const uint32_t s1 = (u[1] & kLow4) | (((u[2] >> 2) & kLow2) << 4);
  const uint32_t s2 = ((u[0] >> 4) & kLow4) | (((u[2] >> 4) & kLow2) << 4);
  const uint32_t s3 = ((u[1] >> 4) & kLow4) | (((u[2] >> 6) & kLow2) << 4);
  return _mm_sub_epi8(_mm_set_epi32(int(s3), int(s2), int(s1), int(s0)), _mm_set1_epi8(32));
}

// q2_K: Σ_k sc_k Σ q a (returned) and Σ_k m_k bsum_k (*mins), each as 8 int32 partial sums.
inline __m256i q2_k_sums(const BlockQ2K& w, const BlockQ8K& a, __m256i* mins) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales));
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m128i sc = _mm_and_si128(packed, m4);
  *mins = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4)),
                            load256(a.bsums));
  __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256i q = load256(w.qs + 32 * h);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const int g = 4 * h + j;
      const __m256i p = _mm256_maddubs_epi16(low2_codes(q, j), load256(a.qs + 32 * g));
      const __m256i s = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sc, sub16_scale_mask(g)));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(s, p));
    }
  }
  return sumi;
}

// q3_K: Σ_k sc_k Σ q a. The codes go into maddubs unsigned, u = q + 4 in [0, 7] (the 2 low bits,
// plus 4 where the hmask bit is set), and the offset comes off once: Σ q a = Σ u a - 4 bsum_k.
inline __m256i q3_k_sums(const BlockQ3K& w, const BlockQ8K& a) {
  const __m128i sc = scales_q3_k(w.scales);
  const __m256i offset = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc), load256(a.bsums));
  const __m256i hm = load256(w.hmask);
  const __m256i one = _mm256_set1_epi8(1);
  __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256i q = load256(w.qs + 32 * h);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const int g = 4 * h + j;
      // Bit g of each hmask byte: a 16-bit shift brings the next byte's bits into the top of this
      // one, which the mask drops.
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(hm, g), one);
      const __m256i u = _mm256_or_si256(low2_codes(q, j), _mm256_slli_epi16(high, 2));
      const __m256i p = _mm256_maddubs_epi16(u, load256(a.qs + 32 * g));
      const __m256i s = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, sub16_scale_mask(g)));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(s, p));
    }
  }
  return _mm256_sub_epi32(sumi, _mm256_slli_epi32(offset, 2));
}

// iq4_xs: Σ_b ls_b Σ grid[q] a. The grid codes are signed (|code| <= 127), so maddubs takes
// |code| and the activation with the code's sign; a pair sum fits int16, then madd applies ls_b.
inline __m256i iq4_xs_sums(const BlockIq4Xs& w, const BlockQ8K& a) {
  const uint16_t scales_h = w.scales_h;
  __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int b = 0; b < 8; ++b) {
    const __m256i c = codes_iq4(w.qs + 16 * b);
    const __m256i p =
        _mm256_maddubs_epi16(_mm256_sign_epi8(c, c), _mm256_sign_epi8(load256(a.qs + 32 * b), c));
    const __m256i s = _mm256_set1_epi16(int16_t(iq4_xs_scale(w.scales_l, scales_h, b)));
    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(s, p));
  }
  return sumi;
}

}  // namespace FAK_ISA_NS
}  // namespace fak::quant
