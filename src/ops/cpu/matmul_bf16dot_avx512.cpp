// BF16 weights x BF16 activations -> F32, with AVX512-BF16's vdpbf16ps (Zen 4/5, Sapphire Rapids
// and later): 32 multiply-adds per instruction where widening the weights to f32 does 16.
//
// note: the activations are rounded to bf16 once per call (round-to-nearest-even,
// round_activations_bf16), as transformers computes a bf16 checkpoint in bfloat16; the products of
// two bf16 values are exact in f32 and every sum is an f32 sum. Each output is one 16-lane
// accumulator over k in steps of 32 (the last step zero-padded), reduced in one fixed tree
// (hsum16): every tile shape below does exactly that sequence per output, so decode == prefill ==
// batched holds bit for bit (ops/matmul.h), as on the f32 path.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/avx512_warnings.h"  // first: before the intrinsics headers
#include "ops/cpu/prefetch_rows.h"
#include "ops/matmul_kernels.h"

namespace fak::kernels {

namespace {

constexpr int64_t kStep = 32;   // bf16 elements per vdpbf16ps (one 64-byte line per row)
constexpr int kDecodeRows = 8;  // rows streamed at once for one token
// Prefill tiles: 8 rows x up to 3 tokens (24 accumulators). The rows stay in L1 while the block's
// tokens stream past them from L2, so a tile of more rows reads fewer activation bytes per
// multiply-add: 8 x 3 reads from L2 half of what 4 x 6 did (16 against 32 bytes a cycle at the
// dot-product peak).
constexpr int kTileRows = 8;
constexpr int kTileTokens = 3;
// Tokens whose activations stay in L2 while the rows pass over them. Each block reads every weight
// row once more from memory, so rows of one pass (up to kChunk wide) take blocks of 240 tokens;
// wider rows, read in passes, keep 48 (240 slowed a 4864-wide matrix by a quarter, weights in
// cache). The 0.5B BF16 file's pp256, three interleaved runs: 48 everywhere 606-620 tok/s, 240
// everywhere 614-618, this 630-636.
constexpr int kTokenBlock = 240;
constexpr int kTokenBlockChunked = 48;
constexpr int64_t kChunk = 1024;  // k elements per pass over a block (2 KB of each row)

// The one reduction every output takes: lanes i + i+8, then i + i+4, i + i+2, i + i+1.
inline float hsum16(__m512 v) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// hsum16 of four registers at once, lane k of the result from register k: the same pairs added in
// the same order for each (lanes i + i+8, i + i+4, i + i+2, i + i+1), so the same bits as four
// hsum16 calls, in 14 instructions instead of 32 (by count, hsum16 was a fifth of the instructions
// of a prefill tile of 896-wide rows).
inline __m128 hsum16x4(__m512 a, __m512 b, __m512 c, __m512 d) {
  // Lanes 0..7: a's i + i+8; lanes 8..15: b's.
  const __m512 ab =
      _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
  const __m512 cd =
      _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xee));
  // 128-bit lane k: register k's i + i+4.
  const __m512 s4 =
      _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xdd));
  // Within each 128-bit lane: element 0 = (x0 + x2) + (x1 + x3).
  const __m512 s2 = _mm512_add_ps(s4, _mm512_shuffle_ps(s4, s4, 0xee));
  const __m512 s1 = _mm512_add_ps(s2, _mm512_movehdup_ps(s2));
  return _mm512_castps512_ps128(_mm512_permutexvar_ps(
      _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), s1));
}

// 32 weights of a row from element k, zero past n (the activations are zero-padded there too).
inline __m512bh load_w(const uint8_t* row, int64_t k, int64_t n) {
  if (k + kStep <= n) return (__m512bh)_mm512_loadu_si512(row + 2 * k);
  const __mmask32 m = __mmask32((uint64_t(1) << (n - k)) - 1);
  return (__m512bh)_mm512_maskz_loadu_epi16(m, row + 2 * k);
}

// An RT x TT tile's accumulators over k in [k0, k1): started at zero when k0 == 0, else reloaded
// from `saved`; reduced into y when k1 is the row's end, else saved again ([RT][TT][16]). Cutting
// k this way changes no output's arithmetic: the same accumulator takes the same steps in order.
// kWhole: k0 = 0 and k1 = the row's end, nothing saved (one token).
template <int RT, int TT, bool kPrefetch, bool kWhole = false>
__attribute__((always_inline)) inline void tile(const WeightMatrix& w, int64_t r,
                                                const uint16_t* xb, size_t ldx, float* y,
                                                size_t ldy, int64_t k0, int64_t k1, float* saved) {
  const int64_t n = w.cols;
  const uint8_t* rows[RT];
#pragma GCC unroll 8
  for (int i = 0; i < RT; ++i) rows[i] = w.row(r + i);
  __m512 acc[RT][TT];
#pragma GCC unroll 8
  for (int i = 0; i < RT; ++i)
#pragma GCC unroll 6
    for (int j = 0; j < TT; ++j)
      acc[i][j] =
          kWhole || k0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(saved + (i * TT + j) * 16);
  // One token: fetch the next RT rows a line at a time while these are used (the same reason as
  // the f32 decode kernel: more concurrent streams than the hardware prefetcher follows well).
  const size_t ahead = size_t(RT) * w.row_bytes;
  for (int64_t k = k0; k < k1; k += kStep) {
    if constexpr (kPrefetch) {
#pragma GCC unroll 8
      for (int i = 0; i < RT; ++i)
        _mm_prefetch(reinterpret_cast<const char*>(rows[i] + ahead + 2 * size_t(k)), _MM_HINT_T0);
    }
    // The tokens' activations in registers, each row's weights loaded once and used for all of
    // them: RT x TT accumulators + TT + 1 registers (8 x 3: 28 of 32).
    __m512bh xv[TT];
#pragma GCC unroll 6
    for (int j = 0; j < TT; ++j)
      xv[j] = (__m512bh)_mm512_loadu_si512(xb + size_t(j) * ldx + size_t(k));
#pragma GCC unroll 8
    for (int i = 0; i < RT; ++i) {
      const __m512bh wv = load_w(rows[i], k, n);
#pragma GCC unroll 6
      for (int j = 0; j < TT; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], wv, xv[j]);
    }
  }
  if (!kWhole && k1 < n) {
#pragma GCC unroll 8
    for (int i = 0; i < RT; ++i)
#pragma GCC unroll 6
      for (int j = 0; j < TT; ++j) _mm512_store_ps(saved + (i * TT + j) * 16, acc[i][j]);
    return;
  }
  if constexpr (RT % 4 == 0) {  // a token's four adjacent rows' outputs in one store
#pragma GCC unroll 2
    for (int i = 0; i < RT; i += 4)
#pragma GCC unroll 6
      for (int j = 0; j < TT; ++j)
        _mm_storeu_ps(y + size_t(j) * ldy + size_t(r + i),
                      hsum16x4(acc[i][j], acc[i + 1][j], acc[i + 2][j], acc[i + 3][j]));
  } else {
#pragma GCC unroll 8
    for (int i = 0; i < RT; ++i)
#pragma GCC unroll 6
      for (int j = 0; j < TT; ++j) y[size_t(j) * ldy + size_t(r + i)] = hsum16(acc[i][j]);
  }
}

template <int RT>
void tokens_tile(int tt, const WeightMatrix& w, int64_t r, const uint16_t* xb, size_t ldx, float* y,
                 size_t ldy, int64_t k0, int64_t k1, float* saved) {
  static_assert(kTileTokens == 3);
  switch (tt) {
    case 3:
      return tile<RT, 3, false>(w, r, xb, ldx, y, ldy, k0, k1, saved);
    case 2:
      return tile<RT, 2, false>(w, r, xb, ldx, y, ldy, k0, k1, saved);
    default:
      return tile<RT, 1, false>(w, r, xb, ldx, y, ldy, k0, k1, saved);
  }
}

// Rows [r, r + RT) for the tokens [t0, t1) of a block, k in passes of kChunk: a pass's rows stay in
// L1 while the block's token tiles go over them (a whole 4864-wide row tile is 39 KB, and with
// six tokens' activations beside it neither stayed: down_proj ran at 51% of the dot-product peak,
// the 896-wide matrices at 65-76%).
// While a pass runs, the stretch the next one reads (the same rows' next pass, else the next RT
// rows' first, up to r_end) is prefetched a slice per tile.
template <int RT>
void block_rows_chunked(const WeightMatrix& w, int64_t r, int64_t r_end, const uint16_t* xb,
                        size_t ldx, float* y, size_t ldy, int t0, int t1, float* saved) {
  const int64_t n = w.cols;
  const int64_t n_tiles = (t1 - t0 + kTileTokens - 1) / kTileTokens;
  for (int64_t k0 = 0; k0 < n; k0 += kChunk) {
    const int64_t k1 = n - k0 > kChunk ? k0 + kChunk : n;
    const bool last_pass = k1 == n;
    const int64_t next_r = last_pass ? r + RT : r;
    const int64_t next_count = std::min<int64_t>(RT, r_end - next_r);
    const int64_t next_k0 = last_pass ? 0 : k1;
    const int64_t next_k1 = std::min(n, next_k0 + kChunk);
    for (int t = t0; t < t1; t += kTileTokens) {
      prefetch_rows_part(w, next_r, next_count, 2 * size_t(next_k0), 2 * size_t(next_k1),
                         (t - t0) / kTileTokens, n_tiles);
      tokens_tile<RT>(t1 - t < kTileTokens ? t1 - t : kTileTokens, w, r, xb + size_t(t) * ldx, ldx,
                      y + size_t(t) * ldy, ldy, k0, k1,
                      saved + size_t((t - t0) / kTileTokens) * kTileRows * kTileTokens * 16);
    }
  }
}

}  // namespace

void round_activations_bf16_avx512(const float* x, int n_tokens, int64_t cols, uint16_t* xb,
                                   size_t ldx) {
  for (int t = 0; t < n_tokens; ++t) {
    const float* src = x + size_t(t) * size_t(cols);
    uint16_t* dst = xb + size_t(t) * ldx;
    int64_t k = 0;
    for (; k + 16 <= cols; k += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k),
                          (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + k)));
    if (k < cols) {
      const __mmask16 m = __mmask16((1u << (cols - k)) - 1);
      _mm256_mask_storeu_epi16(dst + k, m,
                               (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + k)));
    }
    std::memset(dst + cols, 0, sizeof(uint16_t) * (ldx - size_t(cols)));
  }
}

void bf16dot_rows_avx512(const WeightMatrix& w, const uint16_t* xb, size_t ldx, int n_tokens,
                         float* y, int64_t r0, int64_t r1) {
  const size_t ldy = size_t(w.rows);
  const int64_t n = w.cols;
  if (n_tokens == 1) {
    int64_t r = r0;
    for (; r + kDecodeRows <= r1; r += kDecodeRows)
      tile<kDecodeRows, 1, true, true>(w, r, xb, ldx, y, ldy, 0, n, nullptr);
    for (; r < r1; ++r) tile<1, 1, false, true>(w, r, xb, ldx, y, ldy, 0, n, nullptr);
    return;
  }
  // Tokens in blocks whose activations stay in cache while the chunk's rows pass over them; in a
  // block, tiles of 4 rows x 6 tokens (the rows' pass of k stays in L1 across the block's tiles).
  alignas(64) float saved[(kTokenBlock / kTileTokens) * kTileRows * kTileTokens * 16];
  const int block = n > kChunk ? kTokenBlockChunked : kTokenBlock;
  for (int t0 = 0; t0 < n_tokens; t0 += block) {
    const int t1 = t0 + block < n_tokens ? t0 + block : n_tokens;
    int64_t r = r0;
    for (; r + kTileRows <= r1; r += kTileRows)
      block_rows_chunked<kTileRows>(w, r, r1, xb, ldx, y, ldy, t0, t1, saved);
    for (; r < r1; ++r) block_rows_chunked<1>(w, r, r1, xb, ldx, y, ldy, t0, t1, saved);
  }
}

}  // namespace fak::kernels
