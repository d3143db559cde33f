// Shared machinery of the AVX2 prefill kernels (gemm_avx2.cpp, gemm_k_avx2.cpp,
// gemm_lowbit_avx2.cpp): 8 weight rows are repacked per call into a "panel" with the rows in SIMD
// lanes, then every token's 8 outputs come out of one accumulator register; and the decode
// kernels' row driver (rows_gemv). Include only from files compiled with -mavx2 -mfma -mf16c.
//
// note: a panel keeps each block's integer sums exact and applies the float steps of dot_ref.cpp's
// block-serial rule lane by lane (one fma per block into one accumulator, blocks in order), so
// every output is bit-identical to the vec_dot of its row. Rows in lanes means the scale products,
// int->float conversions and fmas are shared by 8 outputs instead of being done per output.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/matmul_kernels.h"
#include "quant/avx2_common.h"

namespace fak::kernels {
inline namespace FAK_ISA_NS {

constexpr int kPanelRows = 8;

// v[i] holds 8 dwords of row i; afterwards v[g] holds dword g of rows 0..7 (lane i = row i).
inline void transpose8_epi32(__m256i v[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int g = 0; g < 4; ++g) {
    v[g] = _mm256_permute2x128_si256(u[g], u[g + 4], 0x20);
    v[g + 4] = _mm256_permute2x128_si256(u[g], u[g + 4], 0x31);
  }
}

// The 8 fp16 scales at p[i] + offset (one per row) as 8 floats.
inline __m256 gather_f16x8(const uint8_t* const* p, size_t offset) {
  // Inserted one by one from scalar loads: 8 two-byte stores and a 16-byte reload would stall
  // store forwarding, and the decode kernel's accumulator chain waits on this.
  auto h = [&](int i) {
    uint16_t v;
    std::memcpy(&v, p[i] + offset, 2);
    return int(v);
  };
  __m128i x = _mm_cvtsi32_si128(h(0));
  x = _mm_insert_epi16(x, h(1), 1);
  x = _mm_insert_epi16(x, h(2), 2);
  x = _mm_insert_epi16(x, h(3), 3);
  x = _mm_insert_epi16(x, h(4), 4);
  x = _mm_insert_epi16(x, h(5), 5);
  x = _mm_insert_epi16(x, h(6), 6);
  x = _mm_insert_epi16(x, h(7), 7);
  return _mm256_cvtph_ps(x);
}

// The 8 E8M0 exponents at p[i] + offset (one per row) as 8 floats 2^(e - 128) (quant::e8m0_half).
inline __m256 gather_e8m0_half_x8(const uint8_t* const* p, size_t offset) {
  const __m256i e = _mm256_setr_epi32(p[0][offset], p[1][offset], p[2][offset], p[3][offset],
                                      p[4][offset], p[5][offset], p[6][offset], p[7][offset]);
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
  const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
  const __m256i is_normal = _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1));
  return _mm256_castsi256_ps(_mm256_blendv_epi8(subnormal, normal, is_normal));
}

// Lane i = the sum of the 8 int32 lanes of v[i].
inline __m256i reduce8_epi32(const __m256i v[8]) {
  const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i lo = _mm256_hadd_epi32(h01, h23), hi = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20),
                          _mm256_permute2x128_si256(lo, hi, 0x31));
}

// 4 activation bytes broadcast to all 8 lanes.
inline __m256i bcast4(const void* p) {
  return _mm256_set1_epi32(quant::load_i32(p));
}

// The TT tokens of one tile: activation rows, their block scales as floats and block sums
// (QuantTask::act_scales / act_sums, Q8_0 only) and where each token's 8 outputs go.
template <int TT>
struct TileArgs {
  const uint8_t* acts[TT];
  const float* scales[TT];
  const int32_t* sums[TT];
  float* ys[TT];
  // The tokens' Q8_0 blocks of 16 (QuantTask::act_blocks16: block b of their group at
  // blocks16 + b kAmxActBlockBytes, token j the group's token m0 + j), or null.
  const uint8_t* blocks16 = nullptr;
  int m0 = 0;
};

// One family of weight types: F::kBlock elements per block, F::kPanelBytes bytes of panel per
// block (a multiple of 32), F::prep(rows, nb, panel) and F::tile<TT>(panel, nb, args) which
// writes 8 floats (rows) to each args.ys[j] for the TT activation rows args.acts[j].
// The activations and outputs of tokens [t, t + TT) for the rows from r (nb blocks a row).
template <int TT>
TileArgs<TT> tile_args(const QuantTask& q, int64_t nb, int64_t r, int t) {
  TileArgs<TT> a;
  for (int j = 0; j < TT; ++j) {
    a.acts[j] = q.act + size_t(t + j) * q.act_row_bytes;
    a.scales[j] = q.act_scales ? q.act_scales + size_t(t + j) * size_t(nb) : nullptr;
    a.sums[j] = q.act_sums ? q.act_sums + size_t(t + j) * size_t(nb) : nullptr;
    a.ys[j] = q.y + size_t(t + j) * size_t(q.w->rows) + size_t(r);
  }
  if (q.act_blocks16 && t % 16 + TT <= 16) {
    a.blocks16 = q.act_blocks16 + size_t(t / 16) * size_t(nb) * kAmxActBlockBytes;
    a.m0 = t % 16;
  }
  return a;
}

template <class F, int TT>
void tile_at(const QuantTask& q, const uint8_t* panel, int64_t nb, int64_t r, int t) {
  F::template tile<TT>(panel, nb, tile_args<TT>(q, nb, r, t));
}

// Rows [r0, r1) for every token: whole panels of 8 rows through F, the few rows left over by the
// (equivalent) vec_dot.
template <class F>
void rows_panels(const QuantTask& q, int64_t r0, int64_t r1) {
  const int64_t nb = q.w->cols / F::kBlock;
  struct alignas(32) Line {
    uint8_t bytes[32];
  };
  thread_local std::vector<Line> scratch;
  scratch.resize(size_t(nb) * F::kPanelBytes / 32);
  uint8_t* panel = reinterpret_cast<uint8_t*>(scratch.data());
  int64_t r = r0;
  for (; r + kPanelRows <= r1; r += kPanelRows) {
    const uint8_t* rows[kPanelRows];
    for (int i = 0; i < kPanelRows; ++i) rows[i] = q.w->row(r + i);
    F::prep(rows, nb, panel);
    constexpr int kTT = F::kTT;
    int t = 0;
    for (; t + kTT <= q.n_tokens; t += kTT) tile_at<F, kTT>(q, panel, nb, r, t);
    switch (q.n_tokens - t) {
      case 3:
        tile_at<F, std::min(3, kTT)>(q, panel, nb, r, t);
        break;
      case 2:
        tile_at<F, std::min(2, kTT)>(q, panel, nb, r, t);
        break;
      case 1:
        tile_at<F, 1>(q, panel, nb, r, t);
        break;
      default:
        break;
    }
  }
  for (; r < r1; ++r)
    for (int t = 0; t < q.n_tokens; ++t)
      q.y[size_t(t) * size_t(q.w->rows) + size_t(r)] =
          q.dot(q.w->cols, q.w->row(r), q.act + size_t(t) * q.act_row_bytes);
}

// The decode kernels' driver (gemv_avx2.cpp, gemv_lowbit_avx2.cpp): rows [r0, r1) read in their
// stored layout, 8 at a time. Kind: Block, Act, kBlock and block(rows, b, a, acc), which returns
// acc after block b of the 8 rows (row i in lane i) against activation block a; the rows left over
// go through vec_dot.
template <class Kind>
void rows_gemv(const QuantTask& q, int64_t r0, int64_t r1) {
  const int64_t nb = q.w->cols / Kind::kBlock;
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
      const auto* a =
          reinterpret_cast<const typename Kind::Act*>(q.act + size_t(t) * q.act_row_bytes);
      __m256 acc = _mm256_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) {
        if (next)
          for (const size_t end = size_t(b + 1) * panel_bytes / size_t(nb); prefetched < end;
               prefetched += 64)
            _mm_prefetch(reinterpret_cast<const char*>(next + prefetched), _MM_HINT_T0);
        acc = Kind::block(rows, b, a[b], acc);
      }
      _mm256_storeu_ps(q.y + size_t(t) * size_t(q.w->rows) + size_t(r), acc);
    }
  }
  for (; r < r1; ++r)
    for (int t = 0; t < q.n_tokens; ++t)
      q.y[size_t(t) * size_t(q.w->rows) + size_t(r)] =
          q.dot(q.w->cols, q.w->row(r), q.act + size_t(t) * q.act_row_bytes);
}

}  // namespace FAK_ISA_NS

// gemm_k_avx2.cpp
void rows_q4_k_avx2(const QuantTask& q, int64_t r0, int64_t r1);
void rows_q5_k_avx2(const QuantTask& q, int64_t r0, int64_t r1);
void rows_q6_k_avx2(const QuantTask& q, int64_t r0, int64_t r1);
// gemm_lowbit_avx2.cpp: the prefill tiles of q2_K, q3_K and iq4_xs (null for other types).
QuantTileFn quant_tile_lowbit_avx2(QuantType t);
// gemv_lowbit_avx2.cpp: their decode kernels (null for other types).
QuantTileFn quant_gemv_lowbit_avx2(QuantType t);

}  // namespace fak::kernels
