// AVX2 prefill kernels for the 32-element signed-code types (q8_0, q4_0, q5_0, mxfp4, iq4_nl)
// against Q8_0 activations, and the per-type dispatch. See gemm_avx2.h for the panel scheme: 8
// weight rows in the 8 int32 lanes, so one maddubs multiplies 4 codes of each of the 8 rows by the
// same 4 activation bytes (broadcast), and one fma per block and token serves 8 outputs.
//
// note: every output is bit-identical to the AVX2 / scalar vec_dot of its row (the block-serial
// rule of dot_ref.cpp): exact integer block sums, then acc = fma(d_w * d_a, float(isum), acc) per
// block in order. matmul_quant_test checks it over awkward row and token counts.
#include "ops/quant/gemm_avx2.h"

#include "quant/quant_blocks.h"

namespace fak::kernels {

namespace {

using namespace fak::quant;

// Panel block: 8 float scales, then 8 registers of codes (register g: codes 4g..4g+3 of row i in
// lane i).
//
// q8_0 codes are signed (|q| <= 127), so maddubs takes |w| and the activation with w's sign, and a
// pair sum (up to 2 * 127 * 127) is widened to int32 at once; iq4_nl's grid values (-127..113) the
// same way. q4_0 / q5_0 codes are stored
// unsigned, u = q + kOffset, so maddubs takes them directly (no sign step per token) and
// Σ q a = Σ u a - kOffset Σ a with Σ a precomputed per block (QuantTask::act_sums); their pair
// sums are small, so kGroupsPer16 of them are added in int16 before widening.
template <WType T>
struct Block32 {
  static constexpr int kBlock = kQK;
  static constexpr int kPanelBytes = 32 + 8 * 32;
  static constexpr int kTT = 4;
  static constexpr bool kSigned = T == WType::Q8_0 || T == WType::IQ4_NL;
  static constexpr bool kMx = T == WType::MXFP4;
  static constexpr int kOffset = T == WType::Q4_0 ? 8 : kMx ? 12 : 16;
  // q4_0: 8 x (2 * 15 * 127) = 30480, q5_0: 4 x (2 * 31 * 127) = 31496, mxfp4 4 x (2 * 24 * 127)
  // = 24384, all < 32768.
  static constexpr int kGroupsPer16 = kSigned ? 1 : T == WType::Q4_0 ? 8 : 4;
  using Block = std::conditional_t<
      T == WType::Q8_0, BlockQ8_0,
      std::conditional_t<
          T == WType::Q4_0, BlockQ4_0,
          std::conditional_t<kMx, BlockMxfp4,
                             std::conditional_t<T == WType::IQ4_NL, BlockIq4Nl, BlockQ5_0>>>>;

  static __m256i codes(const uint8_t* row, int64_t i) {
    const Block& b = reinterpret_cast<const Block*>(row)[i];
    if constexpr (T == WType::Q8_0) return load256(b.qs);
    if constexpr (T == WType::IQ4_NL) return codes_iq4(b.qs);
    if constexpr (T == WType::Q4_0) return unpack_nibbles(b.qs);
    if constexpr (kMx) return codes_mxfp4_unsigned(b.qs);
    if constexpr (T == WType::Q5_0)
      return _mm256_or_si256(unpack_nibbles(b.qs),
                             _mm256_and_si256(bits_to_bytes(b.qh), _mm256_set1_epi8(0x10)));
  }

  static void prep(const uint8_t* const* rows, int64_t nb, uint8_t* panel) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* p = panel + size_t(b) * kPanelBytes;
      const size_t at = size_t(b) * sizeof(Block);
      _mm256_store_ps(reinterpret_cast<float*>(p),
                      kMx ? gather_e8m0_half_x8(rows, at) : gather_f16x8(rows, at));
      __m256i v[8];
      for (int i = 0; i < 8; ++i) v[i] = codes(rows[i], b);
      transpose8_epi32(v);
      for (int g = 0; g < 8; ++g)
        _mm256_store_si256(reinterpret_cast<__m256i*>(p + 32 + 32 * g), v[g]);
    }
  }

  template <int TT>
  static void tile(const uint8_t* panel, int64_t nb, const TileArgs<TT>& args) {
    const uint8_t* const* acts = args.acts;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[TT];
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = panel + size_t(b) * kPanelBytes;
      const size_t ab = size_t(b) * sizeof(BlockQ8_0) + 2;  // this block's activation quants
      __m256i isum[TT];
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) isum[j] = _mm256_setzero_si256();
#pragma GCC unroll 1
      for (int g0 = 0; g0 < 8; g0 += kGroupsPer16) {
        __m256i s16[TT];
#pragma GCC unroll 16
        for (int j = 0; j < TT; ++j) s16[j] = _mm256_setzero_si256();
#pragma GCC unroll 1
        for (int g = g0; g < g0 + kGroupsPer16; ++g) {
          const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32 + 32 * g));
          if constexpr (kSigned) {
            const __m256i wabs = _mm256_sign_epi8(w, w);
#pragma GCC unroll 16
            for (int j = 0; j < TT; ++j) {
              const __m256i a = _mm256_sign_epi8(bcast4(acts[j] + ab + 4 * g), w);
              s16[j] = _mm256_maddubs_epi16(wabs, a);
            }
          } else {
#pragma GCC unroll 16
            for (int j = 0; j < TT; ++j)
              s16[j] =
                  _mm256_add_epi16(s16[j], _mm256_maddubs_epi16(w, bcast4(acts[j] + ab + 4 * g)));
          }
        }
#pragma GCC unroll 16
        for (int j = 0; j < TT; ++j)
          isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(s16[j], ones));
      }
      const __m256 dw = _mm256_load_ps(reinterpret_cast<const float*>(p));
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) {
        if constexpr (!kSigned)
          isum[j] = _mm256_sub_epi32(isum[j], _mm256_set1_epi32(kOffset * args.sums[j][b]));
        acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(args.scales[j] + b)),
                                 _mm256_cvtepi32_ps(isum[j]), acc[j]);
      }
    }
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) _mm256_storeu_ps(args.ys[j], acc[j]);
  }
};

}  // namespace

QuantTileFn quant_tile_avx2(QuantType t) {
  switch (t) {
    case QuantType::Q8_0:
      return rows_panels<Block32<WType::Q8_0>>;
    case QuantType::Q4_0:
      return rows_panels<Block32<WType::Q4_0>>;
    case QuantType::Q5_0:
      return rows_panels<Block32<WType::Q5_0>>;
    case QuantType::MXFP4:
      return rows_panels<Block32<WType::MXFP4>>;
    case QuantType::Q4_K:
      return rows_q4_k_avx2;
    case QuantType::Q5_K:
      return rows_q5_k_avx2;
    case QuantType::Q6_K:
      return rows_q6_k_avx2;
    case QuantType::IQ4_NL:
      return rows_panels<Block32<WType::IQ4_NL>>;
    default:
      return quant_tile_lowbit_avx2(t);  // q2_K / q3_K / iq4_xs; q4_1 / q5_1: null, rows of vec_dot
  }
}

}  // namespace fak::kernels
