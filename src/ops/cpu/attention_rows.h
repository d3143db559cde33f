// Key and value rows of one attention tile as f32 row pointers: shared by the AVX2 and AVX-512
// tiles so both see the same values. Include only from files compiled with at least -mavx2 -mf16c.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/isa_namespace.h"

namespace fak::kernels {
inline namespace FAK_ISA_NS {

// Row pointers for keys [j0, j1) of one plane as f32; half rows are widened into `conv`.
template <int HD>
void block_rows(const uint8_t* const* plane, size_t head_offset, DType dt, int j0, int j1,
                float* conv, const float** out) {
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
        const __m512 f = dt == DType::F16 ? _mm512_cvtph_ps(h)
                                          : _mm512_castsi512_ps(
                                                _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
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
