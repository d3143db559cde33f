// The row driver of the AVX-512 prefill tiles over weights packed at load (quant_blocks.h's
// kPacked* / packed32_*): gemm_avx512.cpp's 32-element types, gemm_k4_avx512.cpp's and
// gemm_q6k_avx512.cpp's K-quants. P: F (the family: kTT, tile<TT, true>, and prep_packed where
// kWidensInTile), kBlock and kWidensInTile (the tile rebuilds codes from the packed bytes). Only
// for files compiled with AVX-512.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "ops/matmul_kernels.h"
#include "ops/quant/gemm_avx2.h"
#include "ops/quant/panels_avx512.h"
#include "ops/quant/rows_panels16_avx512.h"

namespace fak::kernels {
inline namespace FAK_ISA_NS {

template <class Family>
struct PackedK {
  using F = Family;
  static constexpr int kBlock = quant::kQKK, kTT = F::kTT;
  static constexpr bool kWidensInTile = true;
};

// Tokens [t, t + TT) of the group at row r, prefetching `next` over its blocks.
template <class P, int TT>
void packed_tile_at(const QuantTask& q, const uint8_t* panel, int64_t nb, int64_t r, int t,
                    NextRows* next) {
  P::F::template tile<TT, true>(panel, nb, tile_args<TT>(q, nb, r, t), next);
}

template <class P, int TT>
void packed_tile_remainder(const QuantTask& q, const uint8_t* panel, int64_t nb, int64_t r, int t,
                           int left, NextRows* next) {
  if constexpr (TT > 0) {
    if (left == TT) return packed_tile_at<P, TT>(q, panel, nb, r, t, next);
    return packed_tile_remainder<P, TT - 1>(q, panel, nb, r, t, left, next);
  }
}

// Rows [r0, r1) (whole groups of 16) of prepacked weights for every token: group r / 16's panels
// are where its rows were. The first tile of a group prefetches kPrefetchAhead ahead of the block
// it reads (it fetched the next group, as the repack for a call's own panels still does, which on
// wide rows is past L1 before it is read: two or four sequences decoding the Gemma-3-27B Q4_K_M
// cut, 34.8 / 34.4 -> 49.7 / 49.5 tok/s at two, 68.8 / 64.2 -> 73.8 / 82.7 at four; the Q8_0 and
// Qwen3-30B-A3B Q4_K_M cuts at four level; the repack for prefill kept its own: 4 KB ahead there
// took pp256 of the 30B Q4_K_M cut from 913-920 to 845-862).
//
// Nibble panels widen their codes in the tile, for every token tile again; past a few tiles that
// costs more than widening them once (matmul_quant_bench Q4_K_prefill128_packed: 12% slower than
// a call's own panels). So calls of more tokens widen each group once into a per-call panel
// (prep_packed) and tile that, as unpacked rows would.
template <class P>
void rows_packed16(const QuantTask& q, int64_t r0, int64_t r1) {
  const int64_t nb = q.w->cols / P::kBlock;
  const size_t group_bytes = size_t(kRows) * q.w->row_bytes;
  constexpr int kOwnPanelsFrom = 3 * P::kTT;  // tokens
  // The AMX planes (a call's own, made from the packed blocks) from this many tokens: below it the
  // VNNI tiles on the packed blocks cost less than making the planes for one tile (one core, 768 x
  // 1024 q4_K, matmul_quant_bench Q4_K_expert_*: 12 tokens 142 GMAC/s through the VNNI tiles,
  // about level with one AMX tile; 16 134 against 192).
  constexpr int kAmxPlanesFrom = 12;
  const bool amx = amx_enabled();
  if constexpr (P::kWidensInTile)
    if (q.n_tokens >= kOwnPanelsFrom ||
        (q.n_tokens >= kAmxPlanesFrom && amx_planes<typename P::F>(q)))
      return tiles_over_panels16<typename P::F>(
          q, r0, r1,
          [&](int64_t r, uint8_t* panel, NextRows& next, bool amx_layout, int64_t b0, int64_t b1) {
            if constexpr (requires { P::F::kAmxPanelBytes; })
              if (amx_layout) return P::F::prep_packed_amx(q.w->row(r), nb, panel, next, b0, b1);
            P::F::prep_packed(q.w->row(r), nb, panel, next);
          });
  // Blocks of rows x tokens (kL2BlockBytes of each): a block's panels are read from memory once,
  // by its first token block, and each token block's activations from L3 once per row block, not
  // once per 16-row group. Two threads, matmul_quant_bench Q8_0_pp512_packed_12288x4096 /
  // _4096x12288 (GLM-4.5-Air's query and output projections): 346-400 / 320-342 -> 391-427 /
  // 356-386 GMAC/s; the GLM-4.5-Air Q8_0 cut's attn_proj in pp512 0.87-0.95 -> 0.82-0.88 ms a
  // token (4 alternations); pp512 of the 0.5B and 30B-A3B Q8_0 files level.
  const size_t act_token_bytes = size_t(nb) * size_t(P::kBlock / 32) * 40;  // a token's blocks16
  const int token_block = int(std::max<size_t>(16, kL2BlockBytes / act_token_bytes / 16 * 16));
  const int64_t row_block = int64_t(std::max<size_t>(1, kL2BlockBytes / group_bytes)) * kRows;
  for (int64_t rb = r0; rb < r1; rb += row_block) {
    const int64_t rb_end = r1 - rb > row_block ? rb + row_block : r1;
    for (int ts = 0; ts < q.n_tokens; ts += token_block) {
      const int ts_end = q.n_tokens - ts > token_block ? ts + token_block : q.n_tokens;
      for (int64_t r = rb; r < rb_end; r += kRows) {
        const uint8_t* panel = q.w->row(r);
        NextRows next{panel + kPrefetchAhead, group_bytes, 0, panel + kPrefetchFar};
        NextRows* first_read = ts == 0 ? &next : nullptr;
        int t = ts;
        if constexpr (!P::kWidensInTile) {
          t = amx_tiles16<typename P::F, true>(q, panel, nb, r, ts, ts_end, amx);
          // Up to 16 tokens of a blocks-of-16 group in one pass (F::tile_blocks16's wide tiles).
          for (; q.act_blocks16 && t % 16 == 0 && ts_end - t > P::kTT; t += 16)
            packed_tile_remainder<P, 16>(q, panel, nb, r, t, std::min(16, ts_end - t),
                                         t == ts ? first_read : nullptr);
        }
        for (; t + P::kTT <= ts_end; t += P::kTT)
          packed_tile_at<P, P::kTT>(q, panel, nb, r, t, t == ts ? first_read : nullptr);
        if (t < ts_end)
          packed_tile_remainder<P, P::kTT - 1>(q, panel, nb, r, t, ts_end - t,
                                               t == ts ? first_read : nullptr);
      }
    }
  }
}

// Up to this many tokens a packed q4_K / q6_K call takes the decode kernels
// (gemv_packed_avx512.cpp), each token on its own; more take the tiles, which share each widened
// code register between tokens: two tokens over 131072 rows from memory, one core
// (matmul_quant_bench *_streamed_2tok_packed), 2.7 / 5.2 ms through the decode kernel twice
// against 2.2 / 3.8 ms through the two-token tile (q4_K / q6_K).
constexpr int kPackedGemvTokens = 1;

template <class P, QuantTileFn kGemv>
void rows_packed16_gemv(const QuantTask& q, int64_t r0, int64_t r1) {
  if (q.n_tokens <= kPackedGemvTokens) return kGemv(q, r0, r1);
  rows_packed16<P>(q, r0, r1);
}

// The low-bit types' packed weights (q2_K, q3_K, iq4_xs: gemm_lowbit_avx512.cpp,
// gemm_iq4xs_avx512.cpp), whose tiles read only a call's own panels: up to this many tokens a call
// takes the decode kernel (gemv_packed_avx512.cpp), token after token over each group while it is
// in cache; more repack each group once into a per-call panel (F::prep_packed, or
// F::prep_packed_amx for F's AMX planes) for the tiles, which share each code register between
// tokens.
constexpr int kLowbitPackedGemvTokens = 3;

template <class F, QuantTileFn kGemv>
void rows_packed_repacked(const QuantTask& q, int64_t r0, int64_t r1) {
  if (q.n_tokens <= kLowbitPackedGemvTokens) return kGemv(q, r0, r1);
  const int64_t nb = q.w->cols / F::kBlock;
  tiles_over_panels16<F>(
      q, r0, r1,
      [&](int64_t r, uint8_t* panel, NextRows& next, bool amx_layout, int64_t b0, int64_t b1) {
        if constexpr (requires { F::kAmxPanelBytes; })
          if (amx_layout) return F::prep_packed_amx(q.w->row(r), nb, panel, next, b0, b1);
        F::prep_packed(q.w->row(r), nb, panel, next);
      });
}

}  // namespace FAK_ISA_NS
}  // namespace fak::kernels
