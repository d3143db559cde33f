// AVX2 dot products of quantized weight rows with Q8_0 / Q8_K activation rows. Same integer sums as
// dot_ref.cpp, accumulated in 8 float lanes. The core trick: _mm256_maddubs_epi16 multiplies
// unsigned by signed bytes, so unsigned weight codes (q4_K, q5_K, q6_K, q4_1, q5_1) feed it
// directly and offsets are applied once per block from activation sums; signed codes (q8_0, q4_0,
// q5_0, q8_K) move their sign onto the activation first (|w| * sign(a, w)).
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "quant/avx2_common.h"
#include "quant/kernels_internal.h"
#include "quant/quant_blocks.h"

namespace fak::quant {

namespace {

// q8_0 / q4_0 / q5_0 / q4_K / q5_K / q6_K follow dot_ref.cpp's block-serial rule: each block's
// integer sum is reduced to one int32, then one scalar fma per block into a single accumulator.
// That costs a horizontal integer add per block, but it is what lets the multi-row kernels
// (gemm_*_avx2.cpp) put rows in SIMD lanes and still reproduce these results bit for bit.

float dot_q8_0(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const BlockQ8_0*>(vw);
  const auto* a = static_cast<const BlockQ8_0*>(va);
  float acc = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const int isum = hsum_i32(dot_i8(load256(w[i].qs), load256(a[i].qs)));
    acc = std::fma(h2f(w[i].d) * h2f(a[i].d), float(isum), acc);
  }
  return acc;
}

float dot_q4_0(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const BlockQ4_0*>(vw);
  const auto* a = static_cast<const BlockQ8_0*>(va);
  float acc = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256i q = codes_q4_0(w[i].qs);
    const int isum = hsum_i32(dot_i8(q, load256(a[i].qs)));
    acc = std::fma(h2f(w[i].d) * h2f(a[i].d), float(isum), acc);
  }
  return acc;
}

float dot_mxfp4(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const BlockMxfp4*>(vw);
  const auto* a = static_cast<const BlockQ8_0*>(va);
  float acc = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const int isum = hsum_i32(dot_i8(codes_mxfp4(w[i].qs), load256(a[i].qs)));
    acc = std::fma(e8m0_half(w[i].e) * h2f(a[i].d), float(isum), acc);
  }
  return acc;
}

// Unsigned codes with a min: d Σ q a + m Σ a (Σ a from maddubs with ones), block-serial as
// dot_ref.cpp, so the AVX-512 panels (gemm_avx512.cpp) give the same bits.
template <typename Block, bool kFiveBit>
float dot_min_32(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const Block*>(vw);
  const auto* a = static_cast<const BlockQ8_0*>(va);
  const __m256i ones = _mm256_set1_epi8(1);
  float acc = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    __m256i q = unpack_nibbles(w[i].qs);
    if constexpr (kFiveBit)
      q = _mm256_or_si256(q, _mm256_and_si256(bits_to_bytes(w[i].qh), _mm256_set1_epi8(0x10)));
    const __m256i y = load256(a[i].qs);
    const float da = h2f(a[i].d);
    acc = std::fma(h2f(w[i].d) * da, float(hsum_i32(dot_u8(q, y))), acc);
    acc = std::fma(h2f(w[i].m) * da, float(hsum_i32(dot_u8(ones, y))), acc);
  }
  return acc;
}

float dot_q5_0(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const BlockQ5_0*>(vw);
  const auto* a = static_cast<const BlockQ8_0*>(va);
  float acc = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const int isum = hsum_i32(dot_i8(codes_q5_0(w[i].qs, w[i].qh), load256(a[i].qs)));
    acc = std::fma(h2f(w[i].d) * h2f(a[i].d), float(isum), acc);
  }
  return acc;
}

template <typename Block, bool kFiveBit>
float dot_k4(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const Block*>(vw);
  const auto* a = static_cast<const BlockQ8K*>(va);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  float acc = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float da = a[i].d;
    const __m256i sm = scales_mins_k4(w[i].scales);
    // Mins: Σ_j m_j (bsum_2j + bsum_2j+1); hadd pairs the 16-element sums into 32-element ones.
    const __m128i bs_lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a[i].bsums));
    const __m128i bs_hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a[i].bsums + 8));
    const __m128i mins_dot =
        _mm_madd_epi16(_mm256_extracti128_si256(sm, 1), _mm_hadd_epi16(bs_lo, bs_hi));

    const __m128i sc128 = _mm256_castsi256_si128(sm);
    const __m256i scales = _mm256_set_m128i(sc128, sc128);
    __m256i hbits;
    if constexpr (kFiveBit) hbits = load256(w[i].qh);
    __m256i sumi = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q4 = load256(w[i].qs + 32 * c);
      __m256i lo = _mm256_and_si256(q4, m4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
      if constexpr (kFiveBit) {
        // Bits 2c and 2c+1 of qh[l]; hbits is shifted right by 2 per chunk, masking after the
        // 16-bit shift keeps only bits from the same byte.
        lo =
            _mm256_add_epi8(lo, _mm256_slli_epi16(_mm256_and_si256(hbits, _mm256_set1_epi8(1)), 4));
        hi =
            _mm256_add_epi8(hi, _mm256_slli_epi16(_mm256_and_si256(hbits, _mm256_set1_epi8(2)), 3));
        hbits = _mm256_srli_epi16(hbits, 2);
      }
      const __m256i p_lo = _mm256_maddubs_epi16(lo, load256(a[i].qs + 64 * c));
      const __m256i p_hi = _mm256_maddubs_epi16(hi, load256(a[i].qs + 64 * c + 32));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(broadcast_i16(scales, 2 * c), p_lo));
      sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(broadcast_i16(scales, 2 * c + 1), p_hi));
    }
    acc = std::fma(da * h2f(w[i].d), float(hsum_i32(sumi)), acc);
    acc = std::fma(-(da * h2f(w[i].dmin)), float(hsum_i32_128(mins_dot)), acc);
  }
  return acc;
}

// q6_K: codes q in [0, 63] go straight into maddubs; the -32 offset is applied once per block as
// 32 Σ_k sc_k bsum_k.
float dot_q6_k(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const BlockQ6K*>(vw);
  const auto* a = static_cast<const BlockQ8K*>(va);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m2 = _mm256_set1_epi8(0x03);
  // Shuffle masks giving 8 copies of scale 2g then 8 copies of scale 2g+1, for group g in 0..7.
  __m128i scale_shuffle[8];
  for (int g = 0; g < 8; ++g)
    scale_shuffle[g] =
        _mm_set_epi64x(0x0101010101010101LL * (2 * g + 1), 0x0101010101010101LL * (2 * g));
  float acc = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = a[i].d * h2f(w[i].d);
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[i].scales));
    const __m256i offset = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), load256(a[i].bsums));
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = load256(w[i].ql + 64 * h);
      const __m256i ql1 = load256(w[i].ql + 64 * h + 32);
      const __m256i qh = load256(w[i].qh + 32 * h);
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4),
                             _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
      q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
      for (int g = 0; g < 4; ++g) {
        const __m256i sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, scale_shuffle[4 * h + g]));
        const __m256i p = _mm256_maddubs_epi16(q[g], load256(a[i].qs + 128 * h + 32 * g));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sc, p));
      }
    }
    sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(offset, 5));
    acc = std::fma(d, float(hsum_i32(sumi)), acc);
  }
  return acc;
}

float dot_q8_k(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const BlockQ8K*>(vw);
  const auto* a = static_cast<const BlockQ8K*>(va);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < kQKK; j += 32)
      sumi = _mm256_add_epi32(sumi, dot_i8(load256(w[i].qs + j), load256(a[i].qs + j)));
    const float d = w[i].d * a[i].d;
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return hsum(acc);
}

QuantKernels make_avx2() {
  QuantKernels k{};
  k.isa = "avx2";
  k.dots[uint32_t(QuantType::Q4_0)] = dot_q4_0;
  k.dots[uint32_t(QuantType::Q4_1)] = dot_min_32<BlockQ4_1, false>;
  k.dots[uint32_t(QuantType::Q5_0)] = dot_q5_0;
  k.dots[uint32_t(QuantType::Q5_1)] = dot_min_32<BlockQ5_1, true>;
  k.dots[uint32_t(QuantType::Q8_0)] = dot_q8_0;
  k.dots[uint32_t(QuantType::Q4_K)] = dot_k4<BlockQ4K, false>;
  k.dots[uint32_t(QuantType::Q5_K)] = dot_k4<BlockQ5K, true>;
  k.dots[uint32_t(QuantType::Q6_K)] = dot_q6_k;
  k.dots[uint32_t(QuantType::Q8_K)] = dot_q8_k;
  k.dots[uint32_t(QuantType::MXFP4)] = dot_mxfp4;
  set_lowbit_dots_avx2(k);
  k.quantize_q8_0 = quantize_q8_0_avx2;
  k.quantize_q8_k = quantize_q8_k_avx2;
  k.fit_k4 = fit_k4_super_block_avx2;
  k.fit_q6_k = fit_q6_k_scales_avx2;
  return k;
}

}  // namespace

const QuantKernels& avx2_kernels() {
  static const QuantKernels k = make_avx2();
  return k;
}

}  // namespace fak::quant
