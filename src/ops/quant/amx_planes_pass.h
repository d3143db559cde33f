// The AMX planes tiles' pass over a panel (q4_K / q5_K: gemm_k4_avx512.cpp, q6_K:
// gemm_q6k_avx512.cpp, q2_K / q3_K: gemm_lowbit_avx512.cpp, iq4_xs: gemm_iq4xs_avx512.cpp): a
// family F whose AMX panel holds its codes times its sub-block scales in planes of one scale digit
// each. Only for files compiled with AVX-512 and -mamx-tile -mamx-int8.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "core/isa_namespace.h"
#include "ops/cpu/amx_tiles.h"
#include "ops/matmul_kernels.h"
#include "ops/quant/block_sums_amx.h"
#include "ops/quant/panels_avx512.h"

namespace fak::kernels {
inline namespace FAK_ISA_NS {

// The AMX planes tiles of F (K4, Q6K: kAmxPanelBytes, kPlanes, block_products, block_float_steps):
// the tokens [ts, ts_end) of this call's AMX panel over its blocks [b0, b1), rows from r, in tiles
// of 16 (the activation tiles q.amx_acts padded with zero tokens). Each tile's accumulators start
// from zero at block 0, else from acc_rows (a tile's 16 x 16 floats at 256 i) where the previous
// range left them, and are left there again, or stored to y after the last block: the same steps
// in the same order per output as one pass over every block. A range of a few blocks keeps its
// panel in L1 while every tile reads it (from L2, the planes' lines cost more than the tile
// products). The products of the next (tile, block) are issued before the float steps of this
// one, so the tile unit and the vector units work at once.
template <class F>
void amx_planes_pass_of(const QuantTask& q, const uint8_t* panel, int64_t nb, int64_t r, int ts,
                        int ts_end, int64_t b0, int64_t b1, float* acc_rows) {
  const int tiles = (ts_end - ts + 15) / 16;
  const int64_t nbc = b1 - b0;
  const int64_t items = int64_t(tiles) * nbc;
  const auto act_block = [&](int i, int64_t b) {
    return q.amx_acts + (size_t(ts / 16 + i) * size_t(nb) + size_t(b)) * kAmxQ8KActBlockBytes;
  };
  alignas(64) int32_t sums[2][F::kPlanes][256];  // [item parity][plane]: token j's rows at 16 j
  const auto products = [&](int64_t item) {
    const int64_t b = b0 + item % nbc;
    F::block_products(act_block(int(item / nbc), b), panel + size_t(b) * F::kAmxPanelBytes,
                      sums[item & 1]);
  };
  amx_use_config(full_tiles_config());
  products(0);
  for (int i = 0; i < tiles; ++i) {
    float* ar = acc_rows + size_t(i) * 256;
    __m512 acc[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j)
      acc[j] = b0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(ar + 16 * j);
    for (int64_t bb = 0; bb < nbc; ++bb) {
      const int64_t item = int64_t(i) * nbc + bb;
      if (item + 1 < items) products(item + 1);
      F::block_float_steps(acc, sums[item & 1], panel + size_t(b0 + bb) * F::kAmxPanelBytes,
                           act_block(i, b0 + bb));
    }
    if (b1 < nb) {
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) _mm512_store_ps(ar + 16 * j, acc[j]);
      continue;
    }
    const int t = ts + 16 * i, n_valid = ts_end - t < 16 ? ts_end - t : 16;
    float* y = q.y + size_t(t) * size_t(q.w->rows) + size_t(r);
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j)
      if (j < n_valid) _mm512_storeu_ps(y + size_t(j) * size_t(q.w->rows), acc[j]);
  }
}

// One tile of tokens [ts, ts_end) (at most 16) with the panel made as it goes: prep_block(b) makes
// block b of the AMX panel, block b + 1's while the tile unit makes block b's products, so the
// vector units' repack and float steps and the tile unit's products overlap (a call of one tile
// otherwise repacked the whole group first, the tile unit idle). Same steps in the same order per
// output as amx_planes_pass_of.
template <class F, class PrepBlock>
void amx_planes_fused_of(const QuantTask& q, uint8_t* panel, int64_t nb, int64_t r, int ts,
                         int ts_end, PrepBlock prep_block) {
  const uint8_t* acts = q.amx_acts + size_t(ts / 16) * size_t(nb) * kAmxQ8KActBlockBytes;
  alignas(64) int32_t sums[2][F::kPlanes][256];
  const auto products = [&](int64_t b) {
    F::block_products(acts + size_t(b) * kAmxQ8KActBlockBytes,
                      panel + size_t(b) * F::kAmxPanelBytes, sums[b & 1]);
  };
  amx_use_config(full_tiles_config());
  prep_block(0);
  products(0);
  __m512 acc[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (b + 1 < nb) {
      prep_block(b + 1);
      products(b + 1);
    }
    F::block_float_steps(acc, sums[b & 1], panel + size_t(b) * F::kAmxPanelBytes,
                         acts + size_t(b) * kAmxQ8KActBlockBytes);
  }
  const int n_valid = ts_end - ts < 16 ? ts_end - ts : 16;
  float* y = q.y + size_t(ts) * size_t(q.w->rows) + size_t(r);
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j)
    if (j < n_valid) _mm512_storeu_ps(y + size_t(j) * size_t(q.w->rows), acc[j]);
}

// The members tiles_over_panels16 (rows_panels16_avx512.h) calls on a family with AMX planes, for F
// deriving from AmxPlanes<F>: F has kAmxPanelBytes, kPlanes, block_products and block_float_steps,
// and to_planes (a panel block in prep's layout into an AMX panel block) with prep_block,
// prep_packed_block, kPanelBytes and kPackedBytes, unless it makes its planes in prep_amx /
// prep_packed_amx of its own (which hide these).
template <class F>
struct AmxPlanes {
  static bool amx_planes_ready(const QuantTask& q) {
    return q.amx_acts != nullptr && q.amx_sum_factor == kAmxQ8KFactor;
  }
  // Blocks [b0, b1) of the AMX panel (of nb), from rows as stored / packed at load.
  static void prep_amx(const uint8_t* const* rows, int64_t nb, uint8_t* panel, NextRows& next,
                       int64_t b0, int64_t b1) {
    alignas(64) uint8_t block[F::kPanelBytes];
    for (int64_t b = b0; b < b1; ++b) {
      next.upto(b, nb);
      F::prep_block(rows, b, block);
      F::to_planes(block, panel + size_t(b) * F::kAmxPanelBytes);
    }
  }
  static void prep_packed_amx(const uint8_t* packed, int64_t nb, uint8_t* panel, NextRows& next,
                              int64_t b0, int64_t b1) {
    alignas(64) uint8_t block[F::kPanelBytes];
    for (int64_t b = b0; b < b1; ++b) {
      next.upto(b, nb);
      F::prep_packed_block(packed + size_t(b) * F::kPackedBytes, block);
      F::to_planes(block, panel + size_t(b) * F::kAmxPanelBytes);
    }
  }
  static void amx_planes_pass(const QuantTask& q, const uint8_t* panel, int64_t nb, int64_t r,
                              int ts, int ts_end, int64_t b0, int64_t b1, float* acc_rows) {
    amx_planes_pass_of<F>(q, panel, nb, r, ts, ts_end, b0, b1, acc_rows);
  }
  template <class PrepBlock>
  static void amx_planes_fused(const QuantTask& q, uint8_t* panel, int64_t nb, int64_t r, int ts,
                               int ts_end, PrepBlock prep_block) {
    amx_planes_fused_of<F>(q, panel, nb, r, ts, ts_end, prep_block);
  }
};

}  // namespace FAK_ISA_NS
}  // namespace fak::kernels
