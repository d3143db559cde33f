// AVX2 quantizers for activations (Q8_0, Q8_K): run once per input row of every matmul, so they
// matter for prefill. They produce exactly the bytes of quantize_q8_0_ref / quantize_q8_k_ref: the
// same max, the same scalar d and 1/d, the same per-element multiply and ties-to-even rounding.
#include <immintrin.h>

#include <cstring>

#include "core/dtype.h"
#include "quant/kernels_internal.h"
#include "quant/quant_blocks.h"

namespace fak::quant {

namespace {

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// |x| max over 32 * groups floats.
inline float abs_max(const float* x, int count) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int j = 0; j < count; j += 8)
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
  return hmax(m);
}

// round(x * id) of 32 floats into 32 int8 in element order, clamped to [-127, 127] and NaN
// (0 * an infinite id) taken as 0, as round_q8 does.
inline void quantize32(const float* x, __m256 id, int8_t* out) {
  constexpr int kMode = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  __m256i v[4];
  for (int k = 0; k < 4; ++k) {
    __m256 q = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), id);
    q = _mm256_and_ps(q, _mm256_cmp_ps(q, q, _CMP_ORD_Q));
    q = _mm256_min_ps(_mm256_max_ps(q, lo), hi);
    v[k] = _mm256_cvtps_epi32(_mm256_round_ps(q, kMode));
  }
  // packs work within 128-bit lanes; the permute restores element order.
  const __m256i p16a = _mm256_packs_epi32(v[0], v[1]);
  const __m256i p16b = _mm256_packs_epi32(v[2], v[3]);
  __m256i p8 = _mm256_packs_epi16(p16a, p16b);
  p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  // note: values are in [-127, 127] (clamped above), so the packs' saturation never fires.
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), p8);
}

}  // namespace

void quantize_q8_0_avx2(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(vy);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const float amax = abs_max(x, kQK);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = f32_to_f16(d);
    std::memcpy(&y[i].d, &dh, 2);
    quantize32(x, _mm256_set1_ps(id), y[i].qs);
  }
}

void quantize_q8_k_avx2(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8K*>(vy);
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    const float amax = abs_max(x, kQKK);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    std::memcpy(&y[i].d, &d, 4);
    const __m256 vid = _mm256_set1_ps(id);
    int16_t bsums[kQKK / 16];
    for (int j = 0; j < kQKK; j += 32) {
      quantize32(x + j, vid, y[i].qs + j);
      // Sums of each 16 quants: pairs via maddubs(1, q), then fours via madd, then a horizontal
      // add within each 128-bit lane.
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs + j));
      const __m256i s4 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
      const __m256i s8 = _mm256_hadd_epi32(s4, s4);
      const __m256i s16 = _mm256_hadd_epi32(s8, s8);
      bsums[j / 16] = int16_t(_mm256_extract_epi32(s16, 0));
      bsums[j / 16 + 1] = int16_t(_mm256_extract_epi32(s16, 4));
    }
    std::memcpy(y[i].bsums, bsums, sizeof bsums);
    int16_t sums32[kQKK / 32];
    for (int k = 0; k < kQKK / 32; ++k) sums32[k] = int16_t(bsums[2 * k] + bsums[2 * k + 1]);
    std::memcpy(y[i].sums32, sums32, sizeof sums32);
  }
}

}  // namespace fak::quant
