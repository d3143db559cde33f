// The row driver of the AVX-512 VNNI prefill tiles that repack 16 rows per call into a panel
// (gemm_avx512.cpp, gemm_lowbit_avx512.cpp). F: kType, kBlock, kPanelBytes, kTT, prep(rows, nb,
// panel, next) and tile<TT>(panel, nb, args). Only for files compiled with AVX-512.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "ops/matmul_kernels.h"
#include "ops/quant/gemm_avx2.h"
#include "ops/quant/panels_avx512.h"
#include "ops/scratch.h"

namespace fak::kernels {
inline namespace FAK_ISA_NS {

// The last `left` (< F::kTT) tokens of a panel as one tile of exactly that width.
template <class F, int TT>
void tile_remainder(const QuantTask& q, const uint8_t* panel, int64_t nb, int64_t r, int t,
                    int left) {
  if constexpr (TT > 0) {
    if (left == TT) return tile_at<F, TT>(q, panel, nb, r, t);
    return tile_remainder<F, TT - 1>(q, panel, nb, r, t, left);
  }
}

// Tokens from t on of the group at row r, in tiles of 16 by AMX where F has them (F::tile_amx16,
// when F::amx_ready(q): the call made what they read) and the CPU does (`amx`:
// kernels::amx_enabled()), the last one with as few as kAmxFewestTokens; returns the first token
// left to the VNNI tiles (t stays a multiple of 16 until then). kPacked: the panel is q8_0's
// packed one, not this call's own, read from memory: the group's first tile streams the weights
// ahead of itself into L2 (`stream`), on into the next group.
// Packed q8_0 (F::tile_amx8) takes a last kAmx8FewestTokens..8 tokens on 8-row tiles.
template <class F, bool kPacked = false>
int amx_tiles16(const QuantTask& q, const uint8_t* panel, int64_t nb, int64_t r, int t, int ts_end,
                bool amx) {
  if constexpr (requires { F::amx_ready(q); })
    if (amx && F::amx_ready(q)) {
      const int first = t;
      for (; t + kAmxFewestTokens <= ts_end; t += 16)
        F::template tile_amx16<kPacked>(q, panel, nb, r, t, ts_end - t < 16 ? ts_end - t : 16,
                                        kPacked && t == first);
      if constexpr (kPacked && requires { F::tile_amx8(q, panel, nb, r, t, 8, false); })
        if (t < ts_end && ts_end - t >= kAmx8FewestTokens && ts_end - t <= 8) {
          F::tile_amx8(q, panel, nb, r, t, ts_end - t, t == first);
          t = ts_end;
        }
    }
  return t < ts_end ? t : ts_end;
}

// Blocks of an AMX planes panel made at a time, every token tile then passing over them (calls of
// more than one tile): one block's 9-12 KB stays in L1 while every tile reads it, and its repack
// on the vector units overlaps the tile unit's products of the block before. One core, 4864 x
// 1024 q4_K packed, 128 tokens (matmul_quant_bench Q4_K_prefill128_packed): tiles over 1 / 2 / 4 /
// all 4 blocks of a panel made whole first 353 / 323 / 314 / 291 GMAC/s, made a block at a time
// 383; 26 tokens on 768 rows 199 -> 232.
inline constexpr int64_t kAmxPlanesBlocks = 1;

// Whether F's AMX tiles read a panel of their own layout (F::kAmxPanelBytes, made by
// prep_amx / prep_packed_amx, tiled by tile_amx_planes for every token of the call).
template <class F>
bool amx_planes(const QuantTask& q) {
  if constexpr (requires { F::amx_planes_ready(q); })
    return amx_enabled() && F::amx_planes_ready(q);
  return false;
}

// The bytes of weights, and of activations, a block of rows x tokens keeps in L2 (the tiles'
// row drivers here and in rows_packed16_avx512.h): a block's weights are read from memory (and
// widened) once, by its first token block, and each token block's activations from L3 once per
// row block, not once per 16-row group. A 512-token call of GLM-4.5-Air's 4096-column rows has
// 2.6 MB of activations, past L2.
inline constexpr size_t kL2BlockBytes = size_t(512) << 10;

// Rows [r0, r_end) (whole groups of 16) for every token through F's tiles, each group's panel
// made by prep(r, panel, next, amx_layout, b0, b1), which prefetches `next` (the next group) over
// its blocks; amx_layout: the panel F's AMX planes tiles read (amx_planes), which then take every
// token, the last tile padded, made blocks [b0, b1) at a time (the other layout: all at once).
template <class F, class Prep>
void tiles_over_panels16(const QuantTask& q, int64_t r0, int64_t r_end, Prep prep) {
  const int64_t nb = q.w->cols / F::kBlock;
  const bool planes = nb > 0 && amx_planes<F>(q);  // no columns: the VNNI tiles store zeros
  size_t panel_bytes = size_t(F::kPanelBytes);
  if constexpr (requires { F::kAmxPanelBytes; })
    if (planes) panel_bytes = size_t(F::kAmxPanelBytes);
  const bool amx = amx_enabled();
  if (!planes) {
    // Blocks of rows x tokens (kL2BlockBytes of each): each group's panel made once, kept while
    // every token block of the call passes over it.
    const size_t one_panel = size_t(nb) * panel_bytes;
    const int64_t groups =
        int64_t(std::max<size_t>(1, kL2BlockBytes / std::max<size_t>(one_panel, 1)));
    // Whole tiles to a token block: AMX's 16 tokens, else the VNNI tile's kTT (Gemma-3-27B's
    // 21504-wide down projection took blocks of 16, each a 4-token tile after two of 6).
    const size_t unit = amx ? 16 : size_t(F::kTT);
    const int token_block =
        int(std::max(unit, kL2BlockBytes / std::max<size_t>(q.act_row_bytes, 1) / unit * unit));
    auto* panels =
        static_cast<uint8_t*>(thread_scratch(ScratchSlot::kQuantPanel, size_t(groups) * one_panel));
    for (int64_t rb = r0; rb < r_end; rb += groups * kRows) {
      const int64_t rb_end = r_end - rb > groups * kRows ? rb + groups * kRows : r_end;
      for (int64_t r = rb; r < rb_end; r += kRows) {
        NextRows next;
        if (r + 2 * kRows <= q.w->rows) next = {q.w->row(r + kRows), kRows * q.w->row_bytes, 0};
        prep(r, panels + size_t((r - rb) / kRows) * one_panel, next, false, 0, nb);
      }
      for (int ts = 0; ts < q.n_tokens; ts += token_block) {
        const int ts_end = q.n_tokens - ts > token_block ? ts + token_block : q.n_tokens;
        for (int64_t r = rb; r < rb_end; r += kRows) {
          const uint8_t* panel = panels + size_t((r - rb) / kRows) * one_panel;
          int t = amx_tiles16<F>(q, panel, nb, r, ts, ts_end, amx);
          for (; t + F::kTT <= ts_end; t += F::kTT) tile_at<F, F::kTT>(q, panel, nb, r, t);
          if (t < ts_end) tile_remainder<F, F::kTT - 1>(q, panel, nb, r, t, ts_end - t);
        }
      }
    }
    return;
  }
  auto* panel =
      static_cast<uint8_t*>(thread_scratch(ScratchSlot::kQuantPanel, size_t(nb) * panel_bytes));
  // Long prompts: a few hundred tokens' activations at a time stay in cache while every panel of
  // this chunk passes over them; panels are repacked again per super-block.
  // (pp2048 of Qwen2.5-0.5B Q8_0: 710-726 -> 742-768 tok/s with blocks of 512.)
  constexpr int kTokenSuperBlock = 512;
  for (int ts = 0; ts < q.n_tokens; ts += kTokenSuperBlock) {
    const int ts_end = q.n_tokens - ts > kTokenSuperBlock ? ts + kTokenSuperBlock : q.n_tokens;
    for (int64_t r = r0; r < r_end; r += kRows) {
      NextRows next;
      if (r + 2 * kRows <= q.w->rows) next = {q.w->row(r + kRows), kRows * q.w->row_bytes, 0};
      if constexpr (requires { F::kAmxPanelBytes; })
        if (planes) {
          if (ts_end - ts <= 16) {
            F::amx_planes_fused(q, panel, nb, r, ts, ts_end,
                                [&](int64_t b) { prep(r, panel, next, true, b, b + 1); });
            continue;
          }
          auto* acc = static_cast<float*>(
              thread_scratch(ScratchSlot::kAmxAccumulators,
                             size_t((ts_end - ts + 15) / 16) * 256 * sizeof(float)));
          for (int64_t b0 = 0; b0 < nb; b0 += kAmxPlanesBlocks) {
            const int64_t b1 = nb - b0 < kAmxPlanesBlocks ? nb : b0 + kAmxPlanesBlocks;
            prep(r, panel, next, true, b0, b1);
            F::amx_planes_pass(q, panel, nb, r, ts, ts_end, b0, b1, acc);
          }
          continue;
        }
      prep(r, panel, next, false, 0, nb);
      int t = amx_tiles16<F>(q, panel, nb, r, ts, ts_end, amx);
      for (; t + F::kTT <= ts_end; t += F::kTT) tile_at<F, F::kTT>(q, panel, nb, r, t);
      if (t < ts_end) tile_remainder<F, F::kTT - 1>(q, panel, nb, r, t, ts_end - t);
    }
  }
}

// Rows [r0, r1) for every token: whole panels of 16 rows here, the rows left over by the AVX2
// kernel (8-row panels, then vec_dot), which gives the same bits.
template <class F>
void rows_panels16(const QuantTask& q, int64_t r0, int64_t r1) {
  const int64_t nb = q.w->cols / F::kBlock;
  const int64_t r_end = r0 + (r1 - r0) / kRows * kRows;
  tiles_over_panels16<F>(
      q, r0, r_end,
      [&](int64_t r, uint8_t* panel, NextRows& next, bool amx_layout, int64_t b0, int64_t b1) {
        const uint8_t* rows[kRows];
        for (int i = 0; i < kRows; ++i) rows[i] = q.w->row(r + i);
        if constexpr (requires { F::kAmxPanelBytes; })
          if (amx_layout) return F::prep_amx(rows, nb, panel, next, b0, b1);
        F::prep(rows, nb, panel, next);
      });
  if (r_end >= r1) return;
  if (QuantTileFn avx2 = quant_tile_avx2(F::kType)) return avx2(q, r_end, r1);
  for (int64_t r = r_end; r < r1; ++r)  // types without AVX2 panels (q4_1 / q5_1): the same bits
    for (int t = 0; t < q.n_tokens; ++t)
      q.y[size_t(t) * size_t(q.w->rows) + size_t(r)] =
          q.dot(q.w->cols, q.w->row(r), q.act + size_t(t) * q.act_row_bytes);
}

}  // namespace FAK_ISA_NS

// gemm_k4_avx512.cpp: the tiles of q4_K and q5_K (null for other types), on rows as stored and
// packed at load; gemm_q6k_avx512.cpp: q6_K's.
QuantTileFn quant_tile_k4_avx512(QuantType t);
QuantTileFn quant_tile_packed_k4_avx512(QuantType t);
QuantTileFn quant_tile_q6k_avx512(bool packed);
// gemm_iq4xs_avx512.cpp: iq4_xs's, on rows as stored and packed at load.
QuantTileFn quant_tile_iq4xs_avx512(bool packed);
// gemm_lowbit_avx512.cpp: the VNNI tiles of q2_K, q3_K and iq4_xs (null for other types), on
// rows as stored and packed at load.
QuantTileFn quant_tile_lowbit_avx512(QuantType t);
QuantTileFn quant_tile_packed_lowbit_avx512(QuantType t);

}  // namespace fak::kernels
