// Inline AVX2 building blocks shared by the quantised dot products (dot_avx2.cpp) and the tiled
// matmul kernels (gemm_avx2.cpp), so both compute bit-identical block sums. Include only from files
// compiled with -mavx2 -mfma -mf16c (*_avx2.cpp).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/isa_namespace.h"

namespace fak::quant {
inline namespace FAK_ISA_NS {

inline float h2f(uint16_t h) {
  return _cvtsh_ss(h);
}

inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

inline float hsum128(__m128 s) {
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hsum(__m256 v) {
  return hsum128(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}

inline int hsum_i32_128(__m128i v) {
  v = _mm_add_epi32(v, _mm_unpackhi_epi64(v, v));
  v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0xB1));
  return _mm_cvtsi128_si32(v);
}

inline int hsum_i32(__m256i v) {
  return hsum_i32_128(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Σ x*y of 32 signed byte pairs, as 8 int32 partial sums.
// note: exact while x != -128 or y != -128 on the same lane as sign(y, x) of y = -128 wraps; the
// quantizers only produce [-127, 127] (q8) or [-16, 15] (q4_0/q5_0), so activations never hit it.
inline __m256i dot_i8(__m256i x, __m256i y) {
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

// Σ u*y of 32 (unsigned <= 127, signed) byte pairs, as 8 int32 partial sums.
inline __m256i dot_u8(__m256i u, __m256i y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1));
}

// 16 bytes of packed nibbles -> 32 bytes: low nibbles (elements 0..15) then high (16..31).
inline __m256i unpack_nibbles(const uint8_t* p) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
}

// 32 bits -> 32 bytes, 0xFF where bit i is set: byte i takes byte i/8 of the word, then tests
// bit i%8 of it.
inline __m256i bits_to_bytes(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  const __m256i spread = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
                                            0x0202020202020202, 0x0303030303030303);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(int(bits)), spread);
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

// q4_0's 32 signed codes q - 8.
inline __m256i codes_q4_0(const uint8_t* qs) {
  return _mm256_sub_epi8(unpack_nibbles(qs), _mm256_set1_epi8(8));
}

// MXFP4's 32 signed codes: the doubled E2M1 value of each nibble (a 16-entry byte table).
inline __m256i codes_mxfp4(const uint8_t* qs) {
  const __m256i table = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0,
                                         1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  return _mm256_shuffle_epi8(table, unpack_nibbles(qs));
}

// The same plus 12 (unsigned, 0..24), for the kernels that subtract the offset through sums.
inline __m256i codes_mxfp4_unsigned(const uint8_t* qs) {
  const __m256i table = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
                                         12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
  return _mm256_shuffle_epi8(table, unpack_nibbles(qs));
}

// IQ4_NL / IQ4_XS's 32 signed codes: the grid value of each nibble (quant::kIq4nlValues).
inline __m256i codes_iq4(const uint8_t* qs) {
  const __m256i table =
      _mm256_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
                       -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
  return _mm256_shuffle_epi8(table, unpack_nibbles(qs));
}

// q5_0's 32 signed codes q - 16: the nibble when the 5th bit is set, nibble - 16 (= nibble | 0xF0
// as a signed byte) when it is not.
inline __m256i codes_q5_0(const uint8_t* qs, const uint8_t* qh) {
  const __m256i hi = _mm256_andnot_si256(bits_to_bytes(qh), _mm256_set1_epi8(char(0xF0)));
  return _mm256_or_si256(unpack_nibbles(qs), hi);
}

// The 8 six-bit scales (bytes 0..7) and mins (bytes 8..15) of a q4_K/q5_K block, unpacked with
// 32-bit word operations (same result as unpack_scales_k4, a few instructions instead of ~30).
inline __m256i scales_mins_k4(const uint8_t* packed) {
  uint32_t u[3];
  std::memcpy(u, packed, 12);
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  const uint32_t sc_lo = u[0] & kLow6;
  const uint32_t sc_hi = (u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4);
  const uint32_t m_lo = u[1] & kLow6;
  const uint32_t m_hi = ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4);
  return _mm256_cvtepu8_epi16(_mm_set_epi32(int(m_hi), int(m_lo), int(sc_hi), int(sc_lo)));
}

// Broadcast int16 lane k of a 128-bit vector (duplicated into both halves) to all 16 lanes.
inline __m256i broadcast_i16(__m256i v, int k) {
  return _mm256_shuffle_epi8(v, _mm256_set1_epi16(int16_t((2 * k) | ((2 * k + 1) << 8))));
}

}  // namespace FAK_ISA_NS
}  // namespace fak::quant
