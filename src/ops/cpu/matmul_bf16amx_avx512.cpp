// BF16 weights x BF16 activations -> F32 on the AMX-BF16 tile unit (Sapphire Rapids and later):
// the bf16-activations path (ops/matmul.h) where the CPU has the tile unit.
//
// Each tile product is C (16 weight rows x up to 16 tokens, f32) += A (the 16 rows' next 32
// elements, read from the stored rows as they are) x B (the tokens' same 32 activations in pairs:
// line p holds each token's elements 2p and 2p + 1). The tile unit sums a product's 32 terms into
// C in its own fixed way (not one f32 add at a time, so vdpbf16ps cannot reproduce it), so this
// path takes every call, one token included, and an output's bits depend only on its row, its
// token's activations and the order of the 32-element steps (k ascending, from a zero C): the same
// for any batch and any tile a token lands in (ops/matmul.h's rule; the tests compare each token
// alone with the batch). Other CPUs (and f32 activations) compute other bits: store keys name it.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/avx512_warnings.h"  // first: before the intrinsics headers
#include "core/cpu_features.h"
#include "ops/cpu/amx_tiles.h"
#include "ops/matmul_kernels.h"
#include "ops/scratch.h"

namespace fak::kernels {

namespace {

constexpr int64_t kStep = 32;  // bf16 elements per tile product (one 64-byte line per row)
constexpr int kRows = 16;      // weight rows per A tile
constexpr int kTokens = 16;    // tokens per B tile

// Tiles: C in 0-3 (row group g, token tile j: 2 g + j), A in 4-5, B in 6-7. `tokens`: the width
// of B and C, 16 (B from the pair layout, 64-byte lines) or 1 (one token's row, 4-byte lines).
AmxTileConfig tiles_config(int tokens) {
  AmxTileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = 16;
    c.bytes_per_row[t] = uint16_t(t == 4 || t == 5 ? 64 : 4 * tokens);
  }
  return c;
}
const AmxTileConfig& config_of(int tokens) {
  static const AmxTileConfig one = tiles_config(1);
  return tokens == 1 ? one : full_tiles_config();  // 16 x 64 bytes each: the shared one
}

// 16 registers of 16 dwords transposed in place: register i = every register's dword i.
[[gnu::always_inline]] inline void transpose16(__m512i r[16]) {
  __m512i t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // u[4 i + j]'s 128-bit lane L: dword 4 L + j of rows 4 i .. 4 i + 3.
  __m512i u[16];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512i va = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88);
    const __m512i vb = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xdd);
    const __m512i wa = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88);
    const __m512i wb = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xdd);
    r[j] = _mm512_shuffle_i32x4(va, wa, 0x88);
    r[8 + j] = _mm512_shuffle_i32x4(va, wa, 0xdd);
    r[4 + j] = _mm512_shuffle_i32x4(vb, wb, 0x88);
    r[12 + j] = _mm512_shuffle_i32x4(vb, wb, 0xdd);
  }
}

// The C tile's 16 rows x 16 tokens (f32, stored at c) into y: token n's outputs for rows
// [r, r + valid_rows), for the first valid_tokens tokens.
void store_outputs(const float* c, float* y, size_t ldy, int valid_rows, int valid_tokens) {
  __m512i v[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) v[i] = _mm512_load_si512(c + 16 * i);
  transpose16(v);
  const __mmask16 m = valid_rows >= 16 ? __mmask16(0xffff) : __mmask16((1u << valid_rows) - 1);
  for (int n = 0; n < valid_tokens; ++n)
    _mm512_mask_storeu_ps(y + size_t(n) * ldy, m, _mm512_castsi512_ps(v[n]));
}

// One or two row groups (A: `a[g]`, lines `a_stride` bytes apart, 64 bytes a step) x one or two
// token tiles (B: `b[j]`, 1 KB a step, or one token's row for `one`), over `steps` steps of 32,
// into the C tiles stored at c (1 KB each, tile 2 g + j).
template <int kGroups, int kTiles, bool kOne>
void products(const uint8_t* const a[2], size_t a_stride, const uint8_t* const b[2], int64_t steps,
              float* c) {
  constexpr long kBStride = kOne ? 4 : 64;
  constexpr size_t kBStep = kOne ? 64 : 1024;
  _tile_zero(0);
  if constexpr (kTiles == 2) _tile_zero(1);
  if constexpr (kGroups == 2) _tile_zero(2);
  if constexpr (kGroups == 2 && kTiles == 2) _tile_zero(3);
  const long as = long(a_stride);
  for (int64_t s = 0; s < steps; ++s) {
    _tile_loadd(4, a[0] + 64 * s, as);
    _tile_loadd(6, b[0] + kBStep * size_t(s), kBStride);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (kTiles == 2) {
      _tile_loadd(7, b[1] + kBStep * size_t(s), kBStride);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (kGroups == 2) {
      _tile_loadd(5, a[1] + 64 * s, as);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (kTiles == 2) _tile_dpbf16ps(3, 5, 7);
    }
  }
  constexpr long kCStride = kOne ? 4 : 64;
  _tile_stored(0, c, kCStride);
  if constexpr (kTiles == 2) _tile_stored(1, c + 256, kCStride);
  if constexpr (kGroups == 2) _tile_stored(2, c + 512, kCStride);
  if constexpr (kGroups == 2 && kTiles == 2) _tile_stored(3, c + 768, kCStride);
}

// Where row group r's A tiles read: the stored rows, or (a group past the last row, or rows whose
// length is not whole steps) a zero-padded copy in `pad`, so no tile reads past a row.
const uint8_t* rows_of(const WeightMatrix& w, int64_t r, size_t ldx, uint8_t* pad, size_t* stride) {
  const int64_t valid = std::min<int64_t>(kRows, w.rows - r);
  if (valid == kRows && w.cols % kStep == 0) {
    *stride = w.row_bytes;
    return w.row(r);
  }
  const size_t line = 2 * ldx;
  std::memset(pad, 0, size_t(kRows) * line);
  for (int64_t i = 0; i < valid; ++i)
    std::memcpy(pad + size_t(i) * line, w.row(r + i), 2 * size_t(w.cols));
  *stride = line;
  return pad;
}

}  // namespace

bool cpu_has_bf16_amx() {
  return amx_enabled() && cpu_features().amx_bf16;
}

size_t bf16amx_pairs_elems(int n_tokens, size_t ldx) {
  return size_t((n_tokens + kTokens - 1) / kTokens) * ldx * kTokens;
}

void bf16amx_pack_pairs(const uint16_t* xb, size_t ldx, int n_tokens, int tile0, int tile1,
                        uint16_t* xt) {
  const int64_t steps = int64_t(ldx) / kStep;
  for (int j = tile0; j < tile1; ++j) {
    const int t0 = j * kTokens, valid = std::min(kTokens, n_tokens - t0);
    uint16_t* out = xt + size_t(j) * ldx * kTokens;
    for (int64_t s = 0; s < steps; ++s) {
      __m512i v[16];
#pragma GCC unroll 16
      for (int n = 0; n < 16; ++n)
        v[n] = n < valid ? _mm512_loadu_si512(xb + size_t(t0 + n) * ldx + size_t(s * kStep))
                         : _mm512_setzero_si512();
      transpose16(v);
#pragma GCC unroll 16
      for (int p = 0; p < 16; ++p)
        _mm512_storeu_si512(out + size_t(s) * 512 + size_t(p) * 32, v[p]);
    }
  }
}

void bf16amx_rows(const WeightMatrix& w, const uint16_t* xb, const uint16_t* xt, size_t ldx,
                  int n_tokens, float* y, int64_t r0, int64_t r1) {
  const size_t ldy = size_t(w.rows);
  const int64_t steps = int64_t(ldx) / kStep;
  const bool one = n_tokens == 1;
  amx_use_config(config_of(one ? 1 : kTokens));
  alignas(64) float c[4 * 256];
  auto* pad = static_cast<uint8_t*>(
      thread_scratch(ScratchSlot::kBf16Rows, 2 * size_t(kRows) * 2 * ldx + 64));
  const int n_tiles = (n_tokens + kTokens - 1) / kTokens;
  for (int64_t r = r0; r < r1; r += 2 * kRows) {
    const bool two = r + kRows < r1;
    size_t stride0 = 0, stride1 = 0;
    const uint8_t* a[2] = {rows_of(w, r, ldx, pad, &stride0), nullptr};
    if (two) a[1] = rows_of(w, r + kRows, ldx, pad + size_t(kRows) * 2 * ldx, &stride1);
    const int rows0 = int(std::min<int64_t>(kRows, r1 - r));
    const int rows1 = two ? int(std::min<int64_t>(kRows, r1 - r - kRows)) : 0;
    if (one) {
      const uint8_t* b[2] = {reinterpret_cast<const uint8_t*>(xb), nullptr};
      if (two && stride0 == stride1) {
        products<2, 1, true>(a, stride0, b, steps, c);
        std::memcpy(y + r, c, sizeof(float) * size_t(rows0));
        std::memcpy(y + r + kRows, c + 512, sizeof(float) * size_t(rows1));
      } else {
        for (int g = 0; g < (two ? 2 : 1); ++g) {
          const uint8_t* ag[2] = {a[g], nullptr};
          products<1, 1, true>(ag, g ? stride1 : stride0, b, steps, c);
          std::memcpy(y + r + g * kRows, c, sizeof(float) * size_t(g ? rows1 : rows0));
        }
      }
      continue;
    }
    for (int j = 0; j < n_tiles; j += 2) {
      const bool pair = j + 1 < n_tiles;
      const uint8_t* b[2] = {
          reinterpret_cast<const uint8_t*>(xt + size_t(j) * ldx * kTokens),
          pair ? reinterpret_cast<const uint8_t*>(xt + size_t(j + 1) * ldx * kTokens) : nullptr};
      const int tok0 = std::min(kTokens, n_tokens - j * kTokens);
      const int tok1 = pair ? std::min(kTokens, n_tokens - (j + 1) * kTokens) : 0;
      float* yj = y + size_t(j) * kTokens * ldy + size_t(r);
      if (two && stride0 == stride1) {
        if (pair)
          products<2, 2, false>(a, stride0, b, steps, c);
        else
          products<2, 1, false>(a, stride0, b, steps, c);
      } else {
        for (int g = 0; g < (two ? 2 : 1); ++g) {
          const uint8_t* ag[2] = {a[g], nullptr};
          float* cg = c + 512 * g;
          if (pair)
            products<1, 2, false>(ag, g ? stride1 : stride0, b, steps, cg);
          else
            products<1, 1, false>(ag, g ? stride1 : stride0, b, steps, cg);
        }
      }
      store_outputs(c, yj, ldy, rows0, tok0);
      if (pair) store_outputs(c + 256, yj + size_t(kTokens) * ldy, ldy, rows0, tok1);
      if (two) {
        store_outputs(c + 512, yj + kRows, ldy, rows1, tok0);
        if (pair) store_outputs(c + 768, yj + size_t(kTokens) * ldy + kRows, ldy, rows1, tok1);
      }
    }
  }
}

}  // namespace fak::kernels
