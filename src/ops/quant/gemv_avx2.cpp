// AVX2 decode kernels (one activation row): 8 weight rows at a time, read in their stored layout.
// Each row's block is multiplied as in vec_dot (8 int32 lanes of partial sums), then the 8 rows'
// partial sums are reduced together into one register with row i in lane i, so the scale
// product, the int->float conversion and the fma of the block-serial rule (dot_ref.cpp) are done
// once for 8 outputs, and no row needs its own horizontal reduction per block.
//
// note: bit-identical to vec_dot per output (exact integer block sums, then the same float steps
// lane by lane); matmul_quant_test compares decode against the vec_dot rows.
#include "ops/quant/gemm_avx2.h"
#include "ops/quant/quant_blocks.h"

namespace fak::kernels {

namespace {

using namespace fak::quant;

template <class Block>
__m256i codes(const Block& b) {
  if constexpr (std::is_same_v<Block, BlockQ8_0>) return load256(b.qs);
  if constexpr (std::is_same_v<Block, BlockQ4_0>) return codes_q4_0(b.qs);
  if constexpr (std::is_same_v<Block, BlockQ5_0>) return codes_q5_0(b.qs, b.qh);
}

template <class Block>
void rows_gemv_signed32(const QuantTask& q, int64_t r0, int64_t r1) {
  const int64_t nb = q.w->cols / kQK;
  int64_t r = r0;
  for (; r + kPanelRows <= r1; r += kPanelRows) {
    const uint8_t* rows[kPanelRows];
    for (int i = 0; i < kPanelRows; ++i) rows[i] = q.w->row(r + i);
    // The 8 rows are read as 8 interleaved streams, which the hardware prefetchers follow worse
    // than one row after another; so the next panel (contiguous) is prefetched evenly over this
    // one's blocks, a few lines per block.
    const uint8_t* next = r + 2 * kPanelRows <= q.w->rows ? q.w->row(r + kPanelRows) : nullptr;
    const size_t panel_bytes = kPanelRows * q.w->row_bytes;
    size_t prefetched = 0;
    for (int t = 0; t < q.n_tokens; ++t) {
      const auto* a = reinterpret_cast<const BlockQ8_0*>(q.act + size_t(t) * q.act_row_bytes);
      __m256 acc = _mm256_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) {
        if (next)
          for (const size_t end = size_t(b + 1) * panel_bytes / size_t(nb); prefetched < end;
               prefetched += 64)
            _mm_prefetch(reinterpret_cast<const char*>(next + prefetched), _MM_HINT_T0);
        const __m256i av = load256(a[b].qs);
        __m256i v[kPanelRows];
#pragma GCC unroll 8
        for (int i = 0; i < kPanelRows; ++i)
          v[i] = dot_i8(codes(reinterpret_cast<const Block*>(rows[i])[b]), av);
        const __m256 dw = gather_f16x8(rows, size_t(b) * sizeof(Block));
        acc = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(h2f(a[b].d))),
                              _mm256_cvtepi32_ps(reduce8_epi32(v)), acc);
      }
      _mm256_storeu_ps(q.y + size_t(t) * size_t(q.w->rows) + size_t(r), acc);
    }
  }
  for (; r < r1; ++r)
    for (int t = 0; t < q.n_tokens; ++t)
      q.y[size_t(t) * size_t(q.w->rows) + size_t(r)] =
          q.dot(q.w->cols, q.w->row(r), q.act + size_t(t) * q.act_row_bytes);
}

}  // namespace

QuantTileFn quant_gemv_avx2(QuantType t) {
  switch (t) {
    case QuantType::Q8_0:
      return rows_gemv_signed32<BlockQ8_0>;
    case QuantType::Q4_0:
      return rows_gemv_signed32<BlockQ4_0>;
    case QuantType::Q5_0:
      return rows_gemv_signed32<BlockQ5_0>;
    default:
      return nullptr;
  }
}

}  // namespace fak::kernels
