// 8 elements of a float weight row (f32, bf16, f16) widened to f32 in an AVX register: shared by
// the AVX2 and AVX-512 float matmul kernels, so both read the weights the same way. Include only
// from files compiled with at least -mavx2 -mf16c.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "core/isa_namespace.h"
#include "ops/matmul.h"

namespace fak::kernels {
inline namespace FAK_ISA_NS {

template <WType T>
inline __m256 load8(const uint8_t* row, int64_t k) {
  if constexpr (T == WType::F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
  } else if constexpr (T == WType::BF16) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k));
    return _mm256_cvtph_ps(h);
  }
}

}  // namespace FAK_ISA_NS
}  // namespace fak::kernels
