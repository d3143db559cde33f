// AVX-512 prefill matmul for float weights (f32, bf16, f16), bit-identical to the AVX2 kernels.
//
// note: the AVX2 kernel gives each output one 8-lane accumulator (fma over k in steps of 8,
// zero-padded tail, a fixed horizontal sum). Here one 16-lane register holds the 8-lane
// accumulators of two weight rows side by side, and the token's 8 activations are broadcast to
// both halves, so every lane does exactly the fmas the AVX2 lane does and the horizontal sum
// repeats AVX2's pairing (x[i] + x[i+4], then + x[i+2], then + x[i+1]). The outputs are the same
// bits as matmul_rows_avx2 (tested), so decode can stay on the AVX2 kernel and the reuse stack's
// guarantees (ops/matmul.h) hold whichever kernel a call takes. What AVX-512 buys is twice the
// multiply-adds per instruction and 32 registers: tiles of 8 rows x 6 tokens.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/avx512_warnings.h"  // first: before the intrinsics headers
#include "ops/cpu/float_rows.h"
#include "ops/cpu/prefetch_rows.h"
#include "ops/matmul_kernels.h"
#include "ops/scratch.h"

namespace fak::kernels {

namespace {

constexpr int kPairs = 4;  // row pairs per tile: 8 rows
constexpr int kGroupRows = 2 * kPairs;
constexpr int kMaxTT = 6;  // tokens per tile
// Up to this many tokens the stored rows are read directly (rows_direct_blocks); more widen them
// into a panel.
constexpr int kDirectMaxTokens = 64;
constexpr int64_t kRowBlock = 16;  // rows widened into one panel (two groups)
constexpr int kTokenBlock = 48;    // tokens streamed past one panel before the next

// Two rows' chunk c (8 elements each) as [row a | row b] in f32, read from the stored rows.
template <WType T>
inline __m512 load_pair(const uint8_t* a, const uint8_t* b, int64_t k) {
  if constexpr (T == WType::F32) {
    return _mm512_insertf32x8(
        _mm512_castps256_ps512(_mm256_loadu_ps(reinterpret_cast<const float*>(a) + k)),
        _mm256_loadu_ps(reinterpret_cast<const float*>(b) + k), 1);
  } else {
    const __m256i h = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 2 * k))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 * k)), 1);
    if constexpr (T == WType::BF16)
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    else
      return _mm512_cvtph_ps(h);
  }
}

// Widens rows [r, r + kGroupRows) of w (rows past `valid` as zeros) into a group panel: for each
// chunk c of 8 columns, kPairs registers of 16 floats, register p = [row 2p chunk c | row 2p+1
// chunk c]. The last chunk is zero-padded like the AVX2 tail.
template <WType T>
void widen_group(const WeightMatrix& w, int64_t r, int64_t valid, int64_t n_chunks, float* panel) {
  const int64_t n = w.cols, n8 = n & ~int64_t(7);
  if (valid >= kGroupRows && n8 == n) {
    // A whole group: each chunk's four registers are one 256-byte stretch of the panel, written
    // in order a whole line at a time (writing a row at a time touched every line of the panel
    // twice, half a line each time, 256 bytes apart).
    const uint8_t* rows[kGroupRows];
#pragma GCC unroll 8
    for (int i = 0; i < kGroupRows; ++i) rows[i] = w.row(r + i);
    for (int64_t c = 0; c < n_chunks; ++c)
#pragma GCC unroll 4
      for (int p = 0; p < kPairs; ++p)
        _mm512_storeu_ps(panel + size_t(c) * 16 * kPairs + size_t(p) * 16,
                         load_pair<T>(rows[2 * p], rows[2 * p + 1], 8 * c));
    return;
  }
  constexpr size_t kElem = T == WType::F32 ? 4 : 2;
  for (int i = 0; i < kGroupRows; ++i) {
    const int p = i / 2, half = i % 2;
    float* dst = panel + size_t(p) * 16 + size_t(half) * 8;
    if (i >= valid) {
      for (int64_t c = 0; c < n_chunks; ++c)
        _mm256_storeu_ps(dst + size_t(c) * 16 * kPairs, _mm256_setzero_ps());
      continue;
    }
    const uint8_t* src = w.row(r + i);
    for (int64_t k = 0; k < n8; k += 8)
      _mm256_storeu_ps(dst + size_t(k / 8) * 16 * kPairs, load8<T>(src, k));
    if (n8 < n) {
      alignas(32) uint8_t buf[32] = {};
      std::memcpy(buf, src + kElem * size_t(n8), kElem * size_t(n - n8));
      _mm256_storeu_ps(dst + size_t(n8 / 8) * 16 * kPairs, load8<T>(buf, 0));
    }
  }
}

// The horizontal sums of 4 accumulators (8 outputs: rows 0..7 of the group) in AVX2 hsum order,
// stored to out[0..7] (masked to `valid` rows).
inline void reduce_store(const __m512 acc[kPairs], float* out, int valid) {
  // Step 1: lanes i and i+4 of each 8-lane half (128-bit blocks 0+1 and 2+3).
  __m512 s[kPairs];
#pragma GCC unroll 4
  for (int p = 0; p < kPairs; ++p)
    s[p] = _mm512_add_ps(acc[p], _mm512_shuffle_f32x4(acc[p], acc[p], _MM_SHUFFLE(2, 3, 0, 1)));
  // Blocks 0 and 2 of each now hold rows 2p and 2p+1: pack four rows per register.
  __m512 a = _mm512_shuffle_f32x4(s[0], s[1], _MM_SHUFFLE(2, 0, 2, 0));  // rows 0 1 2 3
  __m512 b = _mm512_shuffle_f32x4(s[2], s[3], _MM_SHUFFLE(2, 0, 2, 0));  // rows 4 5 6 7
  // Step 2: element j + element j+2 within each block; step 3: + element 1.
  a = _mm512_add_ps(a, _mm512_permute_ps(a, _MM_SHUFFLE(1, 0, 3, 2)));
  b = _mm512_add_ps(b, _mm512_permute_ps(b, _MM_SHUFFLE(1, 0, 3, 2)));
  a = _mm512_add_ps(a, _mm512_permute_ps(a, _MM_SHUFFLE(2, 3, 0, 1)));
  b = _mm512_add_ps(b, _mm512_permute_ps(b, _MM_SHUFFLE(2, 3, 0, 1)));
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m256 r = _mm512_castps512_ps256(_mm512_permutex2var_ps(a, idx, b));
  _mm256_mask_storeu_ps(out, __mmask8((1u << valid) - 1), r);
}

// One tile's accumulators between K-blocks: TT x kPairs registers, stored as they are (not summed),
// so going on from them later gives the bits one pass over all of K gives.
constexpr size_t kPartialFloats = size_t(kMaxTT) * kPairs * 16;

// Chunks [c0, c1) of 8 rows x TT tokens. The accumulators start from zero (first) or from
// `partial`, and end summed into y (last) or stored back to `partial`.
// note: the accumulators must stay in registers; every loop over the tile is unrolled for that.
template <int TT>
__attribute__((always_inline)) inline void tile(const float* panel, int64_t c0, int64_t c1,
                                                const float* x, size_t ldx, float* partial,
                                                bool first, bool last, float* y, size_t ldy,
                                                int valid_rows) {
  __m512 acc[TT][kPairs];
#pragma GCC unroll 6
  for (int j = 0; j < TT; ++j)
#pragma GCC unroll 4
    for (int p = 0; p < kPairs; ++p)
      acc[j][p] =
          first ? _mm512_setzero_ps() : _mm512_load_ps(partial + size_t(j * kPairs + p) * 16);
  const float* xs[TT];
#pragma GCC unroll 6
  for (int j = 0; j < TT; ++j) xs[j] = x + size_t(j) * ldx;
  for (int64_t c = c0; c < c1; ++c) {
    const float* wp = panel + size_t(c) * 16 * kPairs;
    __m512 wv[kPairs];
#pragma GCC unroll 4
    for (int p = 0; p < kPairs; ++p) wv[p] = _mm512_loadu_ps(wp + 16 * p);
#pragma GCC unroll 6
    for (int j = 0; j < TT; ++j) {
      const __m512 xv = _mm512_broadcast_f32x8(_mm256_loadu_ps(xs[j] + 8 * c));
#pragma GCC unroll 4
      for (int p = 0; p < kPairs; ++p) acc[j][p] = _mm512_fmadd_ps(wv[p], xv, acc[j][p]);
    }
  }
  if (last) {
#pragma GCC unroll 6
    for (int j = 0; j < TT; ++j) reduce_store(acc[j], y + size_t(j) * ldy, valid_rows);
    return;
  }
#pragma GCC unroll 6
  for (int j = 0; j < TT; ++j)
#pragma GCC unroll 4
    for (int p = 0; p < kPairs; ++p)
      _mm512_store_ps(partial + size_t(j * kPairs + p) * 16, acc[j][p]);
}

void tile_tokens(int tt, const float* panel, int64_t c0, int64_t c1, const float* x, size_t ldx,
                 float* partial, bool first, bool last, float* y, size_t ldy, int valid_rows) {
  switch (tt) {
    case 6:
      return tile<6>(panel, c0, c1, x, ldx, partial, first, last, y, ldy, valid_rows);
    case 5:
      return tile<5>(panel, c0, c1, x, ldx, partial, first, last, y, ldy, valid_rows);
    case 4:
      return tile<4>(panel, c0, c1, x, ldx, partial, first, last, y, ldy, valid_rows);
    case 3:
      return tile<3>(panel, c0, c1, x, ldx, partial, first, last, y, ldy, valid_rows);
    case 2:
      return tile<2>(panel, c0, c1, x, ldx, partial, first, last, y, ldy, valid_rows);
    default:
      return tile<1>(panel, c0, c1, x, ldx, partial, first, last, y, ldy, valid_rows);
  }
}

// A few tokens (batched decode): 8 stored rows x TT tokens, converted in registers as they stream
// in, with the next 8 rows prefetched a cache line at a time (as the AVX2 decode kernel does).
// Widening a panel would cost a store and a reload per weight for only TT uses of it.
template <WType T, int TT, bool kPrefetch = true>
__attribute__((always_inline)) inline void tile_direct(const WeightMatrix& w, int64_t r,
                                                       const float* x, float* y, size_t ldy) {
  const int64_t n = w.cols;
  const uint8_t* rows[kGroupRows];
#pragma GCC unroll 8
  for (int i = 0; i < kGroupRows; ++i) rows[i] = w.row(r + i);
  __m512 acc[TT][kPairs];
#pragma GCC unroll 6
  for (int j = 0; j < TT; ++j)
#pragma GCC unroll 4
    for (int p = 0; p < kPairs; ++p) acc[j][p] = _mm512_setzero_ps();
  constexpr size_t kElem = T == WType::F32 ? 4 : 2;
  constexpr int64_t kLineElems = int64_t(64 / kElem);
  const size_t ahead = size_t(kGroupRows) * w.row_bytes;
  for (int64_t k = 0; k < n; k += 8) {
    if (kPrefetch && k % kLineElems == 0) {
#pragma GCC unroll 8
      for (int i = 0; i < kGroupRows; ++i)
        _mm_prefetch(reinterpret_cast<const char*>(rows[i] + ahead + size_t(k) * kElem),
                     _MM_HINT_T0);
    }
    __m512 wv[kPairs];
#pragma GCC unroll 4
    for (int p = 0; p < kPairs; ++p) wv[p] = load_pair<T>(rows[2 * p], rows[2 * p + 1], k);
#pragma GCC unroll 6
    for (int j = 0; j < TT; ++j) {
      const __m512 xv = _mm512_broadcast_f32x8(_mm256_loadu_ps(x + size_t(j) * size_t(n) + k));
#pragma GCC unroll 4
      for (int p = 0; p < kPairs; ++p) acc[j][p] = _mm512_fmadd_ps(wv[p], xv, acc[j][p]);
    }
  }
#pragma GCC unroll 6
  for (int j = 0; j < TT; ++j) reduce_store(acc[j], y + size_t(j) * ldy, kGroupRows);
}

// One 8-row group against TT tokens; only the group's first token block prefetches the next
// group (later blocks find this group's rows in cache).
template <WType T>
void group_tokens(int tt, bool first, const WeightMatrix& w, int64_t r, const float* x, float* y,
                  size_t ldy) {
#define FAK_GROUP_CASE(N)                                   \
  case N:                                                   \
    return first ? tile_direct<T, N, true>(w, r, x, y, ldy) \
                 : tile_direct<T, N, false>(w, r, x, y, ldy);
  switch (tt) {
    FAK_GROUP_CASE(6)
    FAK_GROUP_CASE(5)
    FAK_GROUP_CASE(4)
    FAK_GROUP_CASE(3)
    default:
      return first ? tile_direct<T, 2, true>(w, r, x, y, ldy)
                   : tile_direct<T, 2, false>(w, r, x, y, ldy);
  }
#undef FAK_GROUP_CASE
}

// A few tokens (batched decode) up to a few dozen (decode steps topped up with prompt chunks):
// each 8-row group is read from memory once and its tiles run over the tokens in blocks of at most
// kMaxTT (split evenly: more than 6 tokens leave no block under 3), converting the stored rows in
// registers; the group stays in L1/L2 for the blocks after the first. Widening a panel first costs
// a store and a reload per weight, which only pays off over many more tokens (bf16 lm_head, 16
// tokens: 23 ms through a panel).
template <WType T>
void rows_direct_blocks(const WeightMatrix& w, const float* x, int n_tokens, float* y, int64_t r0,
                        int64_t r1) {
  const int n_blocks = (n_tokens + kMaxTT - 1) / kMaxTT;
  const size_t ldy = size_t(w.rows);
  int64_t r = r0;
  for (; r + kGroupRows <= r1; r += kGroupRows)
    for (int b = 0, t = 0; b < n_blocks; ++b) {
      const int tt = (n_tokens - t) / (n_blocks - b);
      group_tokens<T>(tt, b == 0, w, r, x + size_t(t) * size_t(w.cols),
                      y + size_t(t) * ldy + size_t(r), ldy);
      t += tt;
    }
  if (r < r1) matmul_rows_avx2(w, x, n_tokens, y, r, r1);
}

template <WType T>
void rows_typed(const WeightMatrix& w, const float* x, int n_tokens, float* y, int64_t r0,
                int64_t r1) {
  const int64_t n = w.cols;
  const int64_t n_chunks = (n + 7) / 8;
  const size_t ldy = size_t(w.rows);
  // Activations whose rows are not a whole number of 8-column chunks are copied zero-padded (the
  // AVX2 tail pads the same way), so the tile's loop has no tail.
  size_t ldx = size_t(n);
  if (n % 8 != 0) {
    ldx = size_t(n_chunks) * 8;
    auto* padded = static_cast<float*>(
        thread_scratch(ScratchSlot::kPaddedActivations, sizeof(float) * ldx * size_t(n_tokens)));
    for (int t = 0; t < n_tokens; ++t) {
      std::memcpy(padded + size_t(t) * ldx, x + size_t(t) * size_t(n), sizeof(float) * size_t(n));
      std::memset(padded + size_t(t) * ldx + size_t(n), 0, sizeof(float) * (ldx - size_t(n)));
    }
    x = padded;
  }
  const size_t group_floats = size_t(n_chunks) * 16 * kPairs;
  constexpr int kGroups = int(kRowBlock / kGroupRows);
  constexpr int kTilesPerGroup = (kTokenBlock + kMaxTT - 1) / kMaxTT;
  auto* panel = static_cast<float*>(thread_scratch(
      ScratchSlot::kFloatPanel,
      sizeof(float) * (group_floats * kGroups + kPartialFloats * kGroups * kTilesPerGroup)));
  float* partials = panel + group_floats * kGroups;
  // K in blocks of kKBlockChunks: a group's slice of the panel (16 KB) stays in L1 while the token
  // block's tiles pass over it, and their activations come from L2 a slice at a time. Over all of
  // K at once the panel and the activations both streamed from L2. One core, the 0.5B shape's 896 x
  // 4864 down projection, 256 tokens, best of three interleaved: 175 -> 184 GFLOP/s (the up
  // projection and qo unchanged, 187-196).
  constexpr int64_t kKBlockChunks = 64;
  const int64_t n_kblocks = (n_chunks + kKBlockChunks - 1) / kKBlockChunks;
  // Long prompts: the activations of a few hundred tokens at a time, so they stay in cache while
  // every row block of this chunk passes over them (all of a 2048-token prompt's activations are
  // 7-40 MB, re-read from memory per row block); rows are widened again per super-block.
  // (pp2048 of Qwen2.5-0.5B F16: 385 -> 424 tok/s with blocks of 512.)
  constexpr int kTokenSuperBlock = 512;
  for (int ts = 0; ts < n_tokens; ts += kTokenSuperBlock) {
    const int ts_end = ts + kTokenSuperBlock < n_tokens ? ts + kTokenSuperBlock : n_tokens;
    for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
      const int64_t re = rb + kRowBlock < r1 ? rb + kRowBlock : r1;
      int n_groups = 0;
      for (int64_t g = rb; g < re; g += kGroupRows, ++n_groups)
        widen_group<T>(w, g, re - g, n_chunks, panel + size_t(n_groups) * group_floats);
      // The next row block's stored rows are fetched during this block's first token block.
      const int64_t next_rows = std::min(kRowBlock, r1 - re);
      for (int t0 = ts; t0 < ts_end; t0 += kTokenBlock) {
        const int te = t0 + kTokenBlock < ts_end ? t0 + kTokenBlock : ts_end;
        const int tiles_per_group = (te - t0 + kMaxTT - 1) / kMaxTT;
        const int64_t prefetch_parts = int64_t(n_groups) * tiles_per_group * n_kblocks;
        int64_t tile_index = 0;
        for (int64_t kb = 0; kb < n_kblocks; ++kb) {
          const int64_t c0 = kb * kKBlockChunks;
          const int64_t c1 = std::min(n_chunks, c0 + kKBlockChunks);
          for (int gi = 0; gi < n_groups; ++gi) {
            const int64_t g = rb + int64_t(gi) * kGroupRows;
            const int valid = int(re - g < kGroupRows ? re - g : kGroupRows);
            const float* gp = panel + size_t(gi) * group_floats;
            int ti = 0;
            for (int t = t0; t < te; t += kMaxTT, ++ti, ++tile_index) {
              if (t0 == ts)
                prefetch_rows_part(w, re, next_rows, 0, w.row_bytes, tile_index, prefetch_parts);
              const int tt = te - t < kMaxTT ? te - t : kMaxTT;
              tile_tokens(tt, gp, c0, c1, x + size_t(t) * ldx, ldx,
                          partials + kPartialFloats * size_t(gi * kTilesPerGroup + ti), kb == 0,
                          kb == n_kblocks - 1, y + size_t(t) * ldy + size_t(g), ldy, valid);
            }
          }
        }
      }
    }
  }
}

}  // namespace

void matmul_rows_avx512(const WeightMatrix& w, const float* x, int n_tokens, float* y, int64_t r0,
                        int64_t r1) {
  // One token stays on the AVX2 decode kernel (memory-bound; same bits). Up to kDirectMaxTokens
  // read the stored rows directly (whole 8-column chunks only: no tail in that loop); more widen
  // them into a zero-padded panel once per row block.
  if (n_tokens < 2) return matmul_rows_avx2(w, x, n_tokens, y, r0, r1);
  if (n_tokens <= kDirectMaxTokens) {
    if (w.cols % 8 != 0) return matmul_rows_avx2(w, x, n_tokens, y, r0, r1);
    switch (w.type) {
      case WType::F32:
        return rows_direct_blocks<WType::F32>(w, x, n_tokens, y, r0, r1);
      case WType::BF16:
        return rows_direct_blocks<WType::BF16>(w, x, n_tokens, y, r0, r1);
      case WType::F16:
        return rows_direct_blocks<WType::F16>(w, x, n_tokens, y, r0, r1);
      default:
        return matmul_rows_ref(w, x, n_tokens, y, r0, r1);
    }
  }
  switch (w.type) {
    case WType::F32:
      return rows_typed<WType::F32>(w, x, n_tokens, y, r0, r1);
    case WType::BF16:
      return rows_typed<WType::BF16>(w, x, n_tokens, y, r0, r1);
    case WType::F16:
      return rows_typed<WType::F16>(w, x, n_tokens, y, r0, r1);
    default:
      return matmul_rows_ref(w, x, n_tokens, y, r0, r1);
  }
}

}  // namespace fak::kernels
