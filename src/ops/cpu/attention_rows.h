// Key and value rows of one attention tile as f32 row pointers: shared by the AVX2 and AVX-512
// tiles so both see the same values. Include only from files compiled with at least -mavx2 -mf16c.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/isa_namespace.h"

namespace fak::kernels {
inline namespace FAK_ISA_NS {

// One head's Q8_0 row (n / 32 blocks: an f16 scale, 32 int8 codes) as n floats q * d: one exact
// product per element, the same in every path.
inline void widen_q8_0(const uint8_t* src, int n, float* dst) {
  for (int b = 0; b < n / 32; ++b, src += 34, dst += 32) {
    uint16_t h;
    std::memcpy(&h, src, 2);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(h));
    for (int k = 0; k < 32; k += 8) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + 2 + k));
      _mm256_storeu_ps(dst + k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
    }
  }
}

// One head's Q4_0 row (n / 32 blocks: an f16 scale, 16 bytes of codes; element j of a block in
// the low nibble of byte j, element j + 16 in its high one) as n floats (q - 8) * d: one exact
// product per element, as the scalar dequantiser computes it.
inline void widen_q4_0(const uint8_t* src, int n, float* dst) {
  const __m128i low = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
  for (int b = 0; b < n / 32; ++b, src += 18, dst += 32) {
    uint16_t h;
    std::memcpy(&h, src, 2);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(h));
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(packed, low), eight);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(packed, 4), low), eight);
    // Codes 0..7 and 8..15 of each half: elements 0..15 from the low nibbles, 16..31 the high.
    const __m128i parts[4] = {lo, _mm_unpackhi_epi64(lo, lo), hi, _mm_unpackhi_epi64(hi, hi)};
    for (int p = 0; p < 4; ++p)
      _mm256_storeu_ps(dst + 8 * p,
                       _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[p])), d));
  }
}

// One head's row of a blocked type (Q8_0, Q4_0) as n floats.
inline void widen_blocked(DType dt, const uint8_t* src, int n, float* dst) {
  if (dt == DType::Q8_0)
    widen_q8_0(src, n, dst);
  else
    widen_q4_0(src, n, dst);
}

#if defined(__AVX512F__)
// One block of a Q8_0 / Q4_0 row (32 elements) as two registers of f32, elements 0..15 and
// 16..31: each one product code * scale, as widen_q8_0 / widen_q4_0 make it, sixteen at a time.
[[gnu::always_inline]] inline void widen_block16(const uint8_t* block, bool q8, __m512& first,
                                                 __m512& second) {
  uint16_t h;
  std::memcpy(&h, block, 2);
  const __m512 d = _mm512_set1_ps(_cvtsh_ss(h));
  __m128i lo, hi;  // elements 0..15 and 16..31 as int8
  if (q8) {
    lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
    hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 18));
  } else {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
    const __m128i low = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    lo = _mm_sub_epi8(_mm_and_si128(packed, low), eight);
    hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(packed, 4), low), eight);
  }
  first = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)), d);
  second = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)), d);
}

// widen_blocked sixteen elements per conversion: the same products, half the instructions (decode
// at depth widens every V row it reads).
inline void widen_blocked16(DType dt, const uint8_t* src, int n, float* dst) {
  const bool q8 = dt == DType::Q8_0;
  const size_t block_bytes = q8 ? 34 : 18;
  for (int b = 0; b < n / 32; ++b, src += block_bytes, dst += 32) {
    __m512 first, second;
    widen_block16(src, q8, first, second);
    _mm512_storeu_ps(dst, first);
    _mm512_storeu_ps(dst + 16, second);
  }
}
#endif

// Row pointers for keys [j0, j1) of one plane as f32; half, q8_0 and q4_0 rows are widened into
// `conv`.
template <int HD>
void block_rows(const uint8_t* const* plane, size_t head_offset, DType dt, int j0, int j1,
                float* conv, const float** out) {
  if (dtype_blocked(dt)) {
    for (int j = j0; j < j1; ++j) {
      float* dst = conv + size_t(j - j0) * HD;
#if defined(__AVX512F__)
      widen_blocked16(dt, plane[j] + head_offset, HD, dst);
#else
      widen_blocked(dt, plane[j] + head_offset, HD, dst);
#endif
      out[j - j0] = dst;
    }
    return;
  }
  if (dt == DType::F32) {
    for (int j = j0; j < j1; ++j)
      out[j - j0] = reinterpret_cast<const float*>(plane[j] + head_offset);
    return;
  }
#if defined(__AVX512F__)
  if constexpr (HD % 16 == 0) {
    // Sixteen elements per conversion: half the instructions of the 8-wide loop below.
    for (int j = j0; j < j1; ++j) {
      const auto* src = reinterpret_cast<const uint16_t*>(plane[j] + head_offset);
      float* dst = conv + size_t(j - j0) * HD;
      for (int d = 0; d < HD; d += 16) {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + d));
        const __m512 f = dt == DType::F16
                             ? _mm512_cvtph_ps(h)
                             : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        _mm512_storeu_ps(dst + d, f);
      }
      out[j - j0] = dst;
    }
    return;
  }
#endif
  for (int j = j0; j < j1; ++j) {
    const auto* src = reinterpret_cast<const uint16_t*>(plane[j] + head_offset);
    float* dst = conv + size_t(j - j0) * HD;
    for (int d = 0; d < HD; d += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + d));
      const __m256 f = dt == DType::F16
                           ? _mm256_cvtph_ps(h)
                           : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
      _mm256_storeu_ps(dst + d, f);
    }
    out[j - j0] = dst;
  }
}

// Asks for the rows of keys [j0, j1) of one plane ahead of their use: decode reads each row once,
// from memory, and the hardware prefetcher alone left the kernel waiting on every block.
inline void prefetch_rows(const uint8_t* const* plane, size_t head_offset, size_t row_bytes, int j0,
                          int j1) {
  for (int j = j0; j < j1; ++j)
    for (size_t b = 0; b < row_bytes; b += 64)
      _mm_prefetch(reinterpret_cast<const char*>(plane[j] + head_offset + b), _MM_HINT_T0);
}

}  // namespace FAK_ISA_NS
}  // namespace fak::kernels
