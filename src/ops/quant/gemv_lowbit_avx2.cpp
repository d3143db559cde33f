// AVX2 decode kernels (one activation row, a few at most) of q2_K, q3_K and iq4_xs: 8 weight rows
// read in their stored layout (rows_gemv, gemm_avx2.h). Each row's block gives the 8 int32 partial
// sums its vec_dot reduces (lowbit_avx2.h); the 8 rows' are reduced together into one register,
// row i in lane i, and the float steps of the block-serial rule (dot_lowbit_ref.cpp) run once for
// the 8 outputs.
//
// note: bit-identical to vec_dot per output (the same exact integers, then the same float steps
// lane by lane); matmul_quant_test compares decode against the vec_dot rows.
#include <cstddef>

#include "ops/quant/gemm_avx2.h"
#include "quant/lowbit_avx2.h"
#include "quant/quant_blocks.h"

namespace fak::kernels {

namespace {

using namespace fak::quant;

struct Q2K {
  using Block = BlockQ2K;
  using Act = BlockQ8K;
  static constexpr int kBlock = kQKK;

  static __m256 block(const uint8_t* const* rows, int64_t b, const Act& a, __m256 acc) {
    __m256i v[kPanelRows], m[kPanelRows];
#pragma GCC unroll 8
    for (int i = 0; i < kPanelRows; ++i)
      v[i] = q2_k_sums(reinterpret_cast<const Block*>(rows[i])[b], a, &m[i]);
    const __m256 da = _mm256_set1_ps(a.d);
    const size_t at = size_t(b) * sizeof(Block);
    const __m256 dw = gather_f16x8(rows, at + offsetof(Block, d));
    const __m256 dmw = gather_f16x8(rows, at + offsetof(Block, dmin));
    acc = _mm256_fmadd_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(reduce8_epi32(v)), acc);
    return _mm256_fnmadd_ps(_mm256_mul_ps(dmw, da), _mm256_cvtepi32_ps(reduce8_epi32(m)), acc);
  }
};

// q3_K and iq4_xs: one scale per block, like q6_K.
template <class B>
struct OneScale {
  using Block = B;
  using Act = BlockQ8K;
  static constexpr int kBlock = kQKK;

  static __m256 block(const uint8_t* const* rows, int64_t b, const Act& a, __m256 acc) {
    __m256i v[kPanelRows];
#pragma GCC unroll 8
    for (int i = 0; i < kPanelRows; ++i) {
      const Block& w = reinterpret_cast<const Block*>(rows[i])[b];
      if constexpr (std::is_same_v<Block, BlockQ3K>)
        v[i] = q3_k_sums(w, a);
      else
        v[i] = iq4_xs_sums(w, a);
    }
    const __m256 dw = gather_f16x8(rows, size_t(b) * sizeof(Block) + offsetof(Block, d));
    return _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(a.d)),
                           _mm256_cvtepi32_ps(reduce8_epi32(v)), acc);
  }
};

}  // namespace

QuantTileFn quant_gemv_lowbit_avx2(QuantType t) {
  switch (t) {
    case QuantType::Q2_K:
      return rows_gemv<Q2K>;
    case QuantType::Q3_K:
      return rows_gemv<OneScale<BlockQ3K>>;
    case QuantType::IQ4_XS:
      return rows_gemv<OneScale<BlockIq4Xs>>;
    default:
      return nullptr;
  }
}

}  // namespace fak::kernels
