// Reading the packed q2_K, q3_K and iq4_xs blocks (quant_blocks.h's kPackedQ2K* / kPackedQ3K* /
// kPackedIq4Xs*: each row's byte arrays a dword per lane), shared by the decode kernels
// (gemv_packed_avx512.cpp) and the prefill tiles' panels made from them (gemm_lowbit_avx512.cpp).
// Only for files compiled with AVX-512.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "core/isa_namespace.h"
#include "quant/quant_blocks.h"

namespace fak::kernels {
inline namespace FAK_ISA_NS {

// Byte c (0..3) of each dword of v, as an int32: a vpdpwssd pair whose low word is the byte and
// whose high word is 0.
inline __m512i dword_byte(__m512i v, int c) {
  if (c == 3) return _mm512_srli_epi32(v, 24);
  return _mm512_and_si512(c == 0 ? v : _mm512_srli_epi32(v, 8 * c), _mm512_set1_epi32(0xff));
}

// q2_K / q3_K: qs dword 8n + G of a row holds elements 128n + 32j + 4G + (0..3) at bits 2j
// (sub-block 8n + 2j + G / 4). Their 2-bit codes, a byte each.
inline __m512i low2_codes_512(__m512i qs_dword, int j) {
  const __m512i m3 = _mm512_set1_epi8(3);
  return _mm512_and_si512(j == 0 ? qs_dword : _mm512_srli_epi16(qs_dword, 2 * j), m3);
}

// q3_K's codes q + 4 in [0, 7] of the same elements: the 2 low bits, plus 4 where bit 4n + j of
// the hmask byte (hmask dword G: bytes 4G..4G+3) is set.
inline __m512i q3_k_codes_512(__m512i qs_dword, __m512i hmask_dword, int n, int j) {
  const int bit = 4 * n + j;  // brought to bit 2
  const __m512i hb = _mm512_and_si512(
      bit >= 2 ? _mm512_srli_epi16(hmask_dword, bit - 2) : _mm512_slli_epi16(hmask_dword, 2 - bit),
      _mm512_set1_epi8(4));
  // (q >> 2j) & 3 from the first, bit 2 from hb (which has nothing else).
  return _mm512_ternarylogic_epi32(j == 0 ? qs_dword : _mm512_srli_epi16(qs_dword, 2 * j), hb,
                                   _mm512_set1_epi8(3), 0xE4);
}

// q3_K's 16 six-bit scales sc_k (unsigned, 0..63: sc_k - 32 is the scale) from its packed scale
// dwords: byte c of register d is sc_4d+c (quant::unpack_scales_q3_k's bits).
struct Q3KScales {
  __m512i bytes[4];
};
inline Q3KScales q3_k_scales_512(const uint8_t* packed_block) {
  const uint8_t* sp = packed_block + quant::kPackedQ3KScalesOffset;
  const __m512i u0 = _mm512_loadu_si512(sp), u1 = _mm512_loadu_si512(sp + 64),
                u2 = _mm512_loadu_si512(sp + 128);
  const __m512i l4 = _mm512_set1_epi32(0x0f0f0f0f), l2 = _mm512_set1_epi32(0x03030303);
  auto six = [&](__m512i low, __m512i hi2) {
    return _mm512_or_si512(_mm512_and_si512(low, l4),
                           _mm512_slli_epi32(_mm512_and_si512(hi2, l2), 4));
  };
  return {{six(u0, u2), six(u1, _mm512_srli_epi32(u2, 2)),
           six(_mm512_srli_epi32(u0, 4), _mm512_srli_epi32(u2, 4)),
           six(_mm512_srli_epi32(u1, 4), _mm512_srli_epi32(u2, 6))}};
}

// IQ4_NL / iq4_xs: the grid values (quant::kIq4nlValues) as a vpshufb table.
inline __m512i iq4_grid_signed_512() {
  return _mm512_broadcast_i32x4(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kIq4nlValues)));
}

// iq4_xs: the grid values + 128 (unsigned, for vpdpbusd) as a vpshufb table.
inline __m512i iq4_grid_unsigned_512() {
  return _mm512_broadcast_i32x4(
      _mm_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, -127, -115, -103, -90, -75, -59, -39, -15));
}

// iq4_xs: ls_s - 32 of sub-block s for the 16 rows, from the packed scales_l dwords (low) and the
// scales_h words widened to dwords (high): nibble s % 2 of scales_l byte s / 2, and bits 2s of
// scales_h at bit 4.
inline __m512i iq4_xs_scale_512(__m512i low, __m512i high, int s) {
  const __m512i ls =
      _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(low, 4 * s), _mm512_set1_epi32(0x0f)),
                      _mm512_and_si512(s < 2 ? _mm512_slli_epi32(high, 4 - 2 * s)
                                             : _mm512_srli_epi32(high, 2 * s - 4),
                                       _mm512_set1_epi32(0x30)));
  return _mm512_sub_epi32(ls, _mm512_set1_epi32(32));
}
inline __m512i iq4_xs_scales_high_512(const uint8_t* packed_block) {
  return _mm512_cvtepu16_epi32(_mm256_loadu_si256(
      reinterpret_cast<const __m256i*>(packed_block + quant::kPackedIq4XsHighOffset)));
}

}  // namespace FAK_ISA_NS
}  // namespace fak::kernels
