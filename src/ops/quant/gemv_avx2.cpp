// AVX2 decode kernels (one activation row): 8 weight rows at a time, read in their stored layout.
// Each row's block is multiplied as in vec_dot (8 int32 lanes of partial sums), then the 8 rows'
// partial sums are reduced together into one register with row i in lane i, so the scale
// product, the int->float conversion and the fma of the block-serial rule (dot_ref.cpp) are done
// once for 8 outputs, and no row needs its own horizontal reduction per block.
//
// note: bit-identical to vec_dot per output (exact integer block sums, then the same float steps
// lane by lane); matmul_quant_test compares decode against the vec_dot rows.
#include <cstddef>

#include "ops/quant/gemm_avx2.h"
#include "quant/quant_blocks.h"

namespace fak::kernels {

namespace {

using namespace fak::quant;

// Kinds: Block (weight block), Act (activation block), kBlock, and
//   block(rows, b, a, acc): acc after block b of the 8 rows against activation block a.

// q8_0 / q4_0 / q5_0 / mxfp4 / iq4_nl against Q8_0: as their dots in dot_avx2.cpp and
// dot_lowbit_avx2.cpp.
template <class B>
struct Signed32 {
  using Block = B;
  using Act = BlockQ8_0;
  static constexpr int kBlock = kQK;

  static __m256i codes(const Block& b) {
    if constexpr (std::is_same_v<Block, BlockQ8_0>) return load256(b.qs);
    if constexpr (std::is_same_v<Block, BlockQ4_0>) return codes_q4_0(b.qs);
    if constexpr (std::is_same_v<Block, BlockQ5_0>) return codes_q5_0(b.qs, b.qh);
    if constexpr (std::is_same_v<Block, BlockMxfp4>) return codes_mxfp4(b.qs);
    if constexpr (std::is_same_v<Block, BlockIq4Nl>) return codes_iq4(b.qs);
  }
  // The 8 rows' weight scales of block b (fp16 d, or MXFP4's exponent).
  static __m256 scales(const uint8_t* const* rows, int64_t b) {
    if constexpr (std::is_same_v<Block, BlockMxfp4>)
      return gather_e8m0_half_x8(rows, size_t(b) * sizeof(Block));
    else
      return gather_f16x8(rows, size_t(b) * sizeof(Block));
  }

  static __m256 block(const uint8_t* const* rows, int64_t b, const Act& a, __m256 acc) {
    const __m256i av = load256(a.qs);
    __m256i v[kPanelRows];
#pragma GCC unroll 8
    for (int i = 0; i < kPanelRows; ++i)
      v[i] = dot_i8(codes(reinterpret_cast<const Block*>(rows[i])[b]), av);
    const __m256 dw = scales(rows, b);
    return _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(h2f(a.d))),
                           _mm256_cvtepi32_ps(reduce8_epi32(v)), acc);
  }
};

// q4_K / q5_K against Q8_K: as dot_k4 in dot_avx2.cpp, the mins' sums reduced alongside.
template <bool kFiveBit>
struct K4 {
  using Block = std::conditional_t<kFiveBit, BlockQ5K, BlockQ4K>;
  using Act = BlockQ8K;
  static constexpr int kBlock = kQKK;

  static __m256 block(const uint8_t* const* rows, int64_t b, const Act& a, __m256 acc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m128i bs_lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.bsums));
    const __m128i bs_hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.bsums + 8));
    const __m128i bsum32 = _mm_hadd_epi16(bs_lo, bs_hi);  // the 8 32-element sums
    __m256i v[kPanelRows];
    __m128i mins[kPanelRows];
    for (int i = 0; i < kPanelRows; ++i) {
      const Block& w = reinterpret_cast<const Block*>(rows[i])[b];
      const __m256i sm = scales_mins_k4(w.scales);
      mins[i] = _mm_madd_epi16(_mm256_extracti128_si256(sm, 1), bsum32);
      const __m128i sc128 = _mm256_castsi256_si128(sm);
      const __m256i scales = _mm256_set_m128i(sc128, sc128);
      __m256i hbits;
      if constexpr (kFiveBit) hbits = load256(w.qh);
      __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m256i q4 = load256(w.qs + 32 * c);
        __m256i lo = _mm256_and_si256(q4, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
        if constexpr (kFiveBit) {
          lo = _mm256_add_epi8(lo,
                               _mm256_slli_epi16(_mm256_and_si256(hbits, _mm256_set1_epi8(1)), 4));
          hi = _mm256_add_epi8(hi,
                               _mm256_slli_epi16(_mm256_and_si256(hbits, _mm256_set1_epi8(2)), 3));
          hbits = _mm256_srli_epi16(hbits, 2);
        }
        const __m256i p_lo = _mm256_maddubs_epi16(lo, load256(a.qs + 64 * c));
        const __m256i p_hi = _mm256_maddubs_epi16(hi, load256(a.qs + 64 * c + 32));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(broadcast_i16(scales, 2 * c), p_lo));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(broadcast_i16(scales, 2 * c + 1), p_hi));
      }
      v[i] = sumi;
    }
    // Row i's 4 min partial sums into lane i: pair rows i and i + 4 in one register, then hadd.
    __m256i c[4];
    for (int k = 0; k < 4; ++k) c[k] = _mm256_set_m128i(mins[k + 4], mins[k]);
    const __m256i imin =
        _mm256_hadd_epi32(_mm256_hadd_epi32(c[0], c[1]), _mm256_hadd_epi32(c[2], c[3]));
    const __m256 da = _mm256_set1_ps(a.d);
    const __m256 dw = gather_f16x8(rows, size_t(b) * sizeof(Block));
    const __m256 dmw = gather_f16x8(rows, size_t(b) * sizeof(Block) + 2);
    acc = _mm256_fmadd_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(reduce8_epi32(v)), acc);
    return _mm256_fnmadd_ps(_mm256_mul_ps(dmw, da), _mm256_cvtepi32_ps(imin), acc);
  }
};

// q6_K against Q8_K: as dot_q6_k in dot_avx2.cpp.
struct Q6K {
  using Block = BlockQ6K;
  using Act = BlockQ8K;
  static constexpr int kBlock = kQKK;

  static __m256 block(const uint8_t* const* rows, int64_t b, const Act& a, __m256 acc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i m2 = _mm256_set1_epi8(0x03);
    const __m256i bsums = load256(a.bsums);
    __m256i v[kPanelRows];
    for (int i = 0; i < kPanelRows; ++i) {
      const BlockQ6K& w = reinterpret_cast<const BlockQ6K*>(rows[i])[b];
      const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales));
      const __m256i offset = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), bsums);
      __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i ql0 = load256(w.ql + 64 * h);
        const __m256i ql1 = load256(w.ql + 64 * h + 32);
        const __m256i qh = load256(w.qh + 32 * h);
        __m256i q[4];
        q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4),
                               _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
        q[1] =
            _mm256_or_si256(_mm256_and_si256(ql1, m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
        q[2] =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
        q[3] =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) {
          const int k = 2 * (4 * h + g);  // the two 16-element sub-blocks of these 32 codes
          const __m256i sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(
              sc8, _mm_set_epi64x(0x0101010101010101LL * (k + 1), 0x0101010101010101LL * k)));
          const __m256i p = _mm256_maddubs_epi16(q[g], load256(a.qs + 128 * h + 32 * g));
          sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sc, p));
        }
      }
      v[i] = _mm256_sub_epi32(sumi, _mm256_slli_epi32(offset, 5));
    }
    const __m256 dw = gather_f16x8(rows, size_t(b) * sizeof(BlockQ6K) + offsetof(BlockQ6K, d));
    return _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(a.d)),
                           _mm256_cvtepi32_ps(reduce8_epi32(v)), acc);
  }
};

}  // namespace

QuantTileFn quant_gemv_avx2(QuantType t) {
  switch (t) {
    case QuantType::Q8_0:
      return rows_gemv<Signed32<BlockQ8_0>>;
    case QuantType::Q4_0:
      return rows_gemv<Signed32<BlockQ4_0>>;
    case QuantType::Q5_0:
      return rows_gemv<Signed32<BlockQ5_0>>;
    case QuantType::MXFP4:
      return rows_gemv<Signed32<BlockMxfp4>>;
    case QuantType::Q4_K:
      return rows_gemv<K4<false>>;
    case QuantType::Q5_K:
      return rows_gemv<K4<true>>;
    case QuantType::Q6_K:
      return rows_gemv<Q6K>;
    case QuantType::IQ4_NL:
      return rows_gemv<Signed32<BlockIq4Nl>>;
    default:
      return quant_gemv_lowbit_avx2(t);  // q2_K, q3_K, iq4_xs, or null
  }
}

}  // namespace fak::kernels
