// AMX-BF16 attention (ops/attention_kernels.h says what the arithmetic is and why a query's bits
// depend only on its own query and keys). A unit of up to 256 queries of one KV head, in q-tiles
// of 16 queries, goes over the keys in blocks of 128 counted from key 0:
//
//  1. The block's rows are converted into the tile layouts (K as B tiles: 16 keys' dimensions in
//     pairs per line; V rows in pairs of keys; each element as bf16 hi + lo), one block ahead of
//     their use.
//  2. Scores as queries x keys: C tiles (16 queries x 16 keys, f32) take Q_hi K_hi + Q_hi K_lo +
//     Q_lo K_hi per 32 dimensions (A: the queries' rows, made once per unit; B: the K tiles),
//     stored a query per row.
//  3. Per query: scale and mask, the block's max; where it grew, its sum and outputs are rescaled
//     by exp(old - new); p = exp(s - max) and its sum; p as bf16 hi + lo, 32 keys a line of the
//     A tiles. A query's row needs no transposing (in the keys x queries order it did, twice per
//     block: a third of the softmax's instructions).
//  4. Outputs: C tiles (16 queries x 16 dimensions) take P_hi V_hi + P_hi V_lo + P_lo V_hi per
//     chunk of 32 keys (B: the chunk's V rows in pairs), loaded from and stored to memory around
//     each block.
//  5. At the end, out = C * (1 / sum).
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "core/avx512_warnings.h"  // first: before the intrinsics headers
#include "ops/attention_kernels.h"
#include "ops/cpu/amx_tiles.h"
#include "ops/cpu/exp_avx512.h"
#include "ops/scratch.h"

namespace fak::kernels {

namespace {

// The tiles: full_tiles_config(); C in 0-3, A in 2-3 / 4-5 / 6-7 as each step names them.

// x as hi + lo, two bf16 numbers held as f32 whose low 16 bits are zero: hi is x cut to bf16, lo
// the rest (x - hi, exact in f32) cut to bf16, exactly for an f16 or bf16 value (11 or 8
// significant bits): the K and V rows.
struct SplitBf16 {
  __m512i hi, lo;
};

[[gnu::always_inline]] inline SplitBf16 split_bf16(__m512 x) {
  const __m512i top = _mm512_set1_epi32(int(0xffff0000u));
  const __m512i hi = _mm512_and_si512(_mm512_castps_si512(x), top);
  const __m512 rest = _mm512_sub_ps(x, _mm512_castsi512_ps(hi));
  return {hi, _mm512_and_si512(_mm512_castps_si512(rest), top)};
}

// The same for an f32 value (queries, probabilities), the rest rounded to the nearest bf16 (ties
// to even): within 2^-17 of x relatively and without bias (cutting it too drifted each sum by
// 2^-17 one way: three times the error against the f32 products, measured).
[[gnu::always_inline]] inline SplitBf16 split_bf16_rounded(__m512 x) {
  const __m512i top = _mm512_set1_epi32(int(0xffff0000u));
  const __m512i hi = _mm512_and_si512(_mm512_castps_si512(x), top);
  const __m512i rest = _mm512_castps_si512(_mm512_sub_ps(x, _mm512_castsi512_ps(hi)));
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(rest, 16), _mm512_set1_epi32(1));
  const __m512i up = _mm512_add_epi32(rest, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
  return {hi, _mm512_and_si512(up, top)};
}

// 32 such values as a row of 32 bf16 numbers, x's then y's (the conversion rounds nothing).
[[gnu::always_inline]] inline __m512i bf16_join(__m512i x, __m512i y) {
  return __m512i(_mm512_cvtne2ps_pbh(_mm512_castsi512_ps(y), _mm512_castsi512_ps(x)));
}

// Sixteen dwords of bf16 pairs: a's number in the low half of dword e, b's in the high half.
[[gnu::always_inline]] inline __m512i bf16_pairs(__m512i a, __m512i b) {
  // 0xf8: A | (B & C), with A = a's number moved down, C the high-half mask.
  return _mm512_ternarylogic_epi32(_mm512_srli_epi32(a, 16), b, _mm512_set1_epi32(int(0xffff0000u)),
                                   0xf8);
}

// Elements d..d+15 of an f16 / bf16 row as f32.
[[gnu::always_inline]] inline __m512 load16(const uint8_t* row, int d, bool f16) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * size_t(d)));
  return f16 ? _mm512_cvtph_ps(h)
             : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// r[i][e] <- r[e][i] for a 16 x 16 matrix of dwords: the off-diagonal blocks of size 8, 4, 2, 1
// swapped in turn.
[[gnu::always_inline]] inline void transpose16(__m512i* r) {
#pragma GCC unroll 4
  for (int k = 8; k >= 1; k /= 2) {
    alignas(64) int32_t lo_idx[16], hi_idx[16];
    for (int e = 0; e < 16; ++e) {
      lo_idx[e] = (e & k) ? 16 + e - k : e;
      hi_idx[e] = (e & k) ? 16 + e : e + k;
    }
    const __m512i lo = _mm512_load_si512(lo_idx), hi = _mm512_load_si512(hi_idx);
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      if (i & k) continue;
      const __m512i a = r[i], b = r[i + k];
      r[i] = _mm512_permutex2var_epi32(a, lo, b);
      r[i + k] = _mm512_permutex2var_epi32(a, hi, b);
    }
  }
}

// Keys [j0, j1) (j0 a multiple of 16, j1 - j0 of 32) into the tile layouts: K as B tiles, per
// group of 16 keys g and 32 dimensions c a tile at k_hi / k_lo + (g * HD / 32 + c) * 512 whose
// line r holds for key n of the group its dimensions 32c + 2r, 32c + 2r + 1 (the keys' rows
// transposed in dwords), or kKeyRows as A tiles' rows, key j's at k_hi / k_lo + (j - j0) * HD;
// V pairs at v_hi / v_lo + (j - j0) / 2 * 2 HD (dimension d's two values at 2 d). Keys outside
// [first, n_stored) (rows a window dropped, rows past the last) are zeros.
template <int HD, bool F16, bool kKeyRows>
void convert_kv(const KvRows& rows, int first, int n_stored, int j0, int j1, uint16_t* k_hi,
                uint16_t* k_lo, uint16_t* v_hi, uint16_t* v_lo) {
  const SplitBf16 zero{_mm512_setzero_si512(), _mm512_setzero_si512()};
  for (int jg = j0; jg < j1; jg += 16) {
    const uint8_t* k[16];
    const uint8_t* v[16];
    for (int n = 0; n < 16; ++n) {
      const int j = jg + n;
      const bool has = j >= first && j < n_stored;
      k[n] = has ? rows.k[j] + rows.head_offset : nullptr;
      v[n] = has ? rows.v[j] + rows.head_offset : nullptr;
    }
    // K as B tiles: 32 dimensions of each key, hi and lo (exact: both are bf16), transposed.
    const size_t g = size_t(jg - j0) / 16;
    for (int c = 0; c < (kKeyRows ? 0 : HD / 32); ++c) {
      __m512i zh[16], zl[16];
#pragma GCC unroll 16
      for (int n = 0; n < 16; ++n) {
        const SplitBf16 x = k[n] ? split_bf16(load16(k[n], 32 * c, F16)) : zero;
        const SplitBf16 y = k[n] ? split_bf16(load16(k[n], 32 * c + 16, F16)) : zero;
        zh[n] = bf16_join(x.hi, y.hi);
        zl[n] = bf16_join(x.lo, y.lo);
      }
      transpose16(zh);
      transpose16(zl);
      uint16_t* kh = k_hi + (g * (HD / 32) + size_t(c)) * 512;
      uint16_t* kl = k_lo + (g * (HD / 32) + size_t(c)) * 512;
      for (int r = 0; r < 16; ++r) {
        _mm512_store_si512(kh + 32 * r, zh[r]);
        _mm512_store_si512(kl + 32 * r, zl[r]);
      }
    }
    // V: each dimension's two values side by side, hi and lo. With each pair, the pair a block
    // further on asked for from memory: a decode step reads each row once, and a block's worth of
    // requests at once stalled the core.
    const bool ahead = jg + kAmxKeyBlock + 15 < n_stored;
    for (int n = 0; n < 16; n += 2) {
      if (ahead)
        for (int r = jg + kAmxKeyBlock + n; r < jg + kAmxKeyBlock + n + 2; ++r)
          for (int e = 0; e < 2 * HD; e += 64) {
            _mm_prefetch(reinterpret_cast<const char*>(rows.k[r] + rows.head_offset) + e,
                         _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(rows.v[r] + rows.head_offset) + e,
                         _MM_HINT_T0);
          }
      // K as A tiles' rows, a pair at a time like V.
      if constexpr (kKeyRows)
        for (int e = n; e < n + 2; ++e)
#pragma GCC unroll 8
          for (int c = 0; c < HD / 32; ++c) {
            const SplitBf16 x = k[e] ? split_bf16(load16(k[e], 32 * c, F16)) : zero;
            const SplitBf16 y = k[e] ? split_bf16(load16(k[e], 32 * c + 16, F16)) : zero;
            _mm512_store_si512(k_hi + size_t(jg - j0 + e) * HD + 32 * c, bf16_join(x.hi, y.hi));
            _mm512_store_si512(k_lo + size_t(jg - j0 + e) * HD + 32 * c, bf16_join(x.lo, y.lo));
          }
      uint16_t* vh = v_hi + size_t(jg - j0 + n) * HD;  // pair (j - j0) / 2, 2 HD elements a pair
      uint16_t* vl = v_lo + size_t(jg - j0 + n) * HD;
#pragma GCC unroll 16
      for (int d = 0; d < HD; d += 16) {
        const SplitBf16 c0 = v[n] ? split_bf16(load16(v[n], d, F16)) : zero;
        const SplitBf16 c1 = v[n + 1] ? split_bf16(load16(v[n + 1], d, F16)) : zero;
        _mm512_storeu_si512(vh + 2 * d, bf16_pairs(c0.hi, c1.hi));
        _mm512_storeu_si512(vl + 2 * d, bf16_pairs(c0.lo, c1.lo));
      }
    }
  }
}

template <int HD>
void convert_kv(const KvRows& rows, int first, int n_stored, int j0, int j1, bool key_rows,
                uint16_t* k_hi, uint16_t* k_lo, uint16_t* v_hi, uint16_t* v_lo) {
  const bool f16 = rows.dtype == DType::F16;
  if (f16 && key_rows)
    convert_kv<HD, true, true>(rows, first, n_stored, j0, j1, k_hi, k_lo, v_hi, v_lo);
  else if (f16)
    convert_kv<HD, true, false>(rows, first, n_stored, j0, j1, k_hi, k_lo, v_hi, v_lo);
  else if (key_rows)
    convert_kv<HD, false, true>(rows, first, n_stored, j0, j1, k_hi, k_lo, v_hi, v_lo);
  else
    convert_kv<HD, false, false>(rows, first, n_stored, j0, j1, k_hi, k_lo, v_hi, v_lo);
}

// C tile T += A(AH) B(BH) + A(AH) B(BL) + A(AL) B(BH): the high parts' product and the two cross
// terms, in that order in every path, A always the keys (scores) or the probabilities (outputs).
// (GCC's tile intrinsics paste the tile number into the instruction's text: literals only.)
#define FAK_AMX_DP3(T, AH, AL, BH, BL) \
  do {                                 \
    _tile_dpbf16ps(T, AH, BH);         \
    _tile_dpbf16ps(T, AH, BL);         \
    _tile_dpbf16ps(T, AL, BH);         \
  } while (0)

// The queries of q-tile i (t.q[16 i ...], absent ones zeros) as A tiles: for each 32 dimensions c,
// line n holds query n's dimensions 32c..32c + 31 as bf16, hi parts in one tile (1 KB) and lo
// parts in the next.
template <int HD>
void query_tiles(const AmxUnit& t, int i, uint16_t* qb) {
  for (int n = 0; n < 16; ++n) {
    const bool present = 16 * i + n < t.n && t.q[16 * i + n];
    for (int c = 0; c < HD / 32; ++c) {
      SplitBf16 x{_mm512_setzero_si512(), _mm512_setzero_si512()}, y = x;
      if (present) {
        x = split_bf16_rounded(_mm512_loadu_ps(t.q[16 * i + n] + 32 * c));
        y = split_bf16_rounded(_mm512_loadu_ps(t.q[16 * i + n] + 32 * c + 16));
      }
      _mm512_store_si512(qb + size_t(2 * c) * 512 + 32 * n, bf16_join(x.hi, y.hi));
      _mm512_store_si512(qb + size_t(2 * c + 1) * 512 + 32 * n, bf16_join(x.lo, y.lo));
    }
  }
}

// The same queries as B tiles, for blocks whose keys are A tiles' rows: for each 32 dimensions c,
// line r holds for query n its dimensions 32c + 2r and 32c + 2r + 1 (hi tile, then lo): the A
// tiles transposed in dwords.
template <int HD>
void query_tiles_transposed(const uint16_t* qa, uint16_t* qb) {
  for (int t = 0; t < 2 * (HD / 32); ++t) {
    __m512i z[16];
    for (int n = 0; n < 16; ++n) z[n] = _mm512_load_si512(qa + size_t(t) * 512 + 32 * n);
    transpose16(z);
    for (int r = 0; r < 16; ++r) _mm512_store_si512(qb + size_t(t) * 512 + 32 * r, z[r]);
  }
}

// A unit of up to kAmxUnitQueries queries of one KV head (q-tiles of 16 queries) over key blocks
// of kAmxKeyBlock counted from key 0 (attention_kernels.h): per block the scores, each query's
// running max updated once (its sum and outputs rescaled by exp(old - new) where it grew), the
// probabilities, and the outputs' products, kept in memory between blocks. Tiles go two at a time
// (two key groups of a q-tile's scores, two q-tiles' outputs, or for a lone q-tile two dimension
// tiles) so that one pair's products run while the other's operands load: a tile register is
// reloaded only after the products reading it.
// A grouped unit (AmxUnit::n_tile_rows) takes the blocks its sequences share as one and each
// sequence's own blocks q-tile by q-tile; a lane's steps are those of its sequence alone.
template <int HD>
void unit_amx(const AmxUnit& t, const KvRows& rows, int first_stored, float scale) {
  constexpr int CH = kAmxKeyChunk, KB = kAmxKeyBlock;
  const int QT = (t.n + 15) / 16;
  int n_max = 0, min_keys = 1 << 30, min_first = 1 << 30, max_first = 0;
  for (int i = 0; i < t.n; ++i) {
    n_max = t.n_keys[i] > n_max ? t.n_keys[i] : n_max;
    min_keys = t.n_keys[i] < min_keys ? t.n_keys[i] : min_keys;
    min_first = t.first_key[i] < min_first ? t.first_key[i] : min_first;
    max_first = t.first_key[i] > max_first ? t.first_key[i] : max_first;
  }
  // Keys [0, shared) are the same rows for every q-tile; past it a grouped unit's q-tile i reads
  // tile_rows[i] up to its own last key.
  const bool grouped = t.n_tile_rows > 0;
  const int shared = grouped ? t.shared_keys : 1 << 30;
  const int b0 = min_first / KB, b1 = (n_max + KB - 1) / KB;
  // The end of block b's keys for queries attending to n keys: whole chunks.
  auto block_end = [&](int b, int n) {
    return b * KB + KB < n ? b * KB + KB : (n + CH - 1) / CH * CH;
  };
  // Scratch: per q-tile the queries' A tiles, the outputs [16][HD], the queries' max and sum; two
  // slots (a pair of q-tiles at work) of a block's scores (a row of keys per query) and of its
  // probabilities' A tiles (per chunk: hi, lo); then two blocks of K tiles and V pairs (one
  // converted while the other is read).
  const size_t qb_elems = size_t(HD / 32) * 1024, pb_elems = size_t(KB / CH) * 1024;
  const size_t sb_floats = size_t(KB) * 16, ob_floats = size_t(16) * HD;
  const size_t kv_elems = size_t(KB) * HD * 4;
  const size_t bytes = size_t(QT) * (4 * qb_elems + 4 * ob_floats + 4 * 32) +
                       2 * (4 * sb_floats + 2 * pb_elems) + 4 * sb_floats + 2 * 2 * kv_elems;
  auto* qb = static_cast<uint16_t*>(thread_scratch(ScratchSlot::kAttention, bytes));
  auto* sb = reinterpret_cast<float*>(qb + size_t(QT) * qb_elems);
  auto* pb = reinterpret_cast<uint16_t*>(sb + 2 * sb_floats);
  auto* ob = reinterpret_cast<float*>(pb + 2 * pb_elems);
  float* ml = ob + size_t(QT) * ob_floats;                           // per q-tile: max[16], sum[16]
  auto* qt = reinterpret_cast<uint16_t*>(ml + size_t(QT) * 32);      // B tiles, made where needed
  float* kq = reinterpret_cast<float*>(qt + size_t(QT) * qb_elems);  // scores, a key per row
  auto* kvb = reinterpret_cast<uint16_t*>(kq + sb_floats);
  bool qt_made[kAmxUnitQueries / 16] = {};

  for (int i = 0; i < QT; ++i) query_tiles<HD>(t, i, qb + size_t(i) * qb_elems);
  std::memset(ob, 0, 4 * size_t(QT) * ob_floats);
  int tile_keys[kAmxUnitQueries / 16];  // per q-tile: its queries' most keys
  for (int i = 0; i < QT; ++i) {
    tile_keys[i] = 0;
    for (int n = 0; n < 16; ++n) {
      const int q = 16 * i + n;
      // A lane's max starts at its sink and its sum at exp(sink - sink) = 1: -inf and 0 without.
      const bool present = q < t.n && t.q[q];
      const float sink = present ? t.sink[q] : -INFINITY;
      ml[32 * i + n] = sink;
      ml[32 * i + 16 + n] = sink == -INFINITY ? 0.0f : 1.0f;
      if (present && t.n_keys[q] > tile_keys[i]) tile_keys[i] = t.n_keys[q];
    }
  }
  const __m512 sc = _mm512_set1_ps(scale), neg_inf = _mm512_set1_ps(-INFINITY);

  // Keys [j0, j1) of `from` (stored up to key n) into buffer `slot`'s K tiles and V pairs, for
  // `readers` q-tiles. K goes in as B tiles (the scores come a query per row) where enough q-tiles
  // share the block to pay for transposing it (32 HD permutations a block); for fewer, as A
  // tiles' rows, the scores a key per row, each q-tile's scores transposed instead (512
  // permutations a block a q-tile). The tile unit's products are the same either way round, and
  // so are the scores' bits.
  struct BlockRows {
    const uint16_t *khi, *klo, *vhi, *vlo;  // key j0's K tiles, its V pair
    bool key_rows;
  };
  auto convert = [&](const KvRows& from, int n, int j0, int j1, int slot, int readers) {
    const bool key_rows = readers * 16 < HD;
    uint16_t* kh = kvb + size_t(slot) * kv_elems;
    convert_kv<HD>(from, first_stored, n, j0, j1, key_rows, kh, kh + size_t(KB) * HD,
                   kh + 2 * size_t(KB) * HD, kh + 3 * size_t(KB) * HD);
    return BlockRows{kh, kh + size_t(KB) * HD, kh + 2 * size_t(KB) * HD, kh + 3 * size_t(KB) * HD,
                     key_rows};
  };
  const long v_stride = long(HD) * 4, o_stride = long(HD) * 4, s_stride = long(KB) * 4;

  // Scores of q-tiles [i0, i1) (at most a pair: slots i & 1) from a block converted as K rows: per
  // q-tile 32 keys x 16 queries at a time (K rows as A, the queries' B tiles), the three products
  // in the order `scores` takes them the other way round, then each 16 x 16 block transposed into
  // the query rows.
  const long k_stride = long(HD) * 2;
  auto scores_by_key = [&](int i0, int i1, const BlockRows& r, int n_keys) {
    for (int i = i0; i < i1; ++i) {
      uint16_t* qbt = qt + size_t(i) * qb_elems;
      if (!qt_made[i]) {
        query_tiles_transposed<HD>(qb + size_t(i) * qb_elems, qbt);
        qt_made[i] = true;
      }
      for (int k0 = 0; k0 < n_keys; k0 += 32) {
        _tile_zero(0);
        _tile_zero(1);
#pragma GCC unroll 8
        for (int c = 0; c < HD / 32; ++c) {
          _tile_loadd(6, qbt + size_t(c) * 1024, 64);
          _tile_loadd(7, qbt + size_t(c) * 1024 + 512, 64);
          _tile_loadd(4, r.khi + size_t(k0) * HD + 32 * c, k_stride);
          _tile_loadd(5, r.klo + size_t(k0) * HD + 32 * c, k_stride);
          _tile_loadd(2, r.khi + size_t(k0 + 16) * HD + 32 * c, k_stride);
          _tile_loadd(3, r.klo + size_t(k0 + 16) * HD + 32 * c, k_stride);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(0, 5, 6);
          _tile_dpbf16ps(0, 4, 7);
          _tile_dpbf16ps(1, 2, 6);
          _tile_dpbf16ps(1, 3, 6);
          _tile_dpbf16ps(1, 2, 7);
        }
        _tile_stored(0, kq + size_t(k0) * 16, 64);
        _tile_stored(1, kq + size_t(k0 + 16) * 16, 64);
      }
      float* s = sb + size_t(i & 1) * sb_floats;
      for (int k0 = 0; k0 < n_keys; k0 += 16) {
        __m512i z[16];
        for (int n = 0; n < 16; ++n) z[n] = _mm512_load_si512(kq + size_t(k0 + n) * 16);
        transpose16(z);
        for (int n = 0; n < 16; ++n) _mm512_store_si512(s + size_t(n) * KB + k0, z[n]);
      }
    }
  };

  // Scores of q-tiles [i0, i1) (at most a pair: slots i & 1) over the block's n_keys keys, a query
  // per line: per q-tile two groups of 16 keys at a time, Q tiles as A and K tiles as B.
  auto scores = [&](int i0, int i1, const BlockRows& r, int n_keys) {
    constexpr size_t kGroup = size_t(HD / 32) * 512;  // one K part (hi or lo) of 16 keys
    if (r.key_rows) return scores_by_key(i0, i1, r, n_keys);
    for (int i = i0; i < i1; ++i) {
      const uint16_t* q = qb + size_t(i) * qb_elems;
      float* s = sb + size_t(i & 1) * sb_floats;
      for (int g = 0; g < n_keys / 16; g += 2) {
        _tile_zero(0);
        _tile_zero(1);
#pragma GCC unroll 8
        for (int c = 0; c < HD / 32; ++c) {
          const size_t at = size_t(g) * kGroup + size_t(c) * 512;
          _tile_loadd(2, q + size_t(c) * 1024, 64);
          _tile_loadd(3, q + size_t(c) * 1024 + 512, 64);
          _tile_loadd(4, r.khi + at, 64);
          _tile_loadd(5, r.klo + at, 64);
          _tile_loadd(6, r.khi + at + kGroup, 64);
          _tile_loadd(7, r.klo + at + kGroup, 64);
          FAK_AMX_DP3(0, 2, 3, 4, 5);
          FAK_AMX_DP3(1, 2, 3, 6, 7);
        }
        _tile_stored(0, s + 16 * g, s_stride);
        _tile_stored(1, s + 16 * (g + 1), s_stride);
      }
    }
  };

  // Q-tile i over keys [j0, j1), a query (a row of scores) at a time: scale and mask, the row's
  // max, the rescale where it grew, then the probabilities into the A tiles (a query's 32 per
  // line, as bf16 hi + lo) and their sum. Rows of absent queries, and rows with no key in the
  // block, add exact zeros.
  auto softmax = [&](int i, int j0, int j1) {
    float* s = sb + size_t(i & 1) * sb_floats;
    uint16_t* p = pb + size_t(i & 1) * pb_elems;
    const int nc = (j1 - j0) / CH;
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i top = _mm512_set1_epi32(int(0xffff0000u));
    for (int n = 0; n < 16; ++n) {
      const int q = 16 * i + n;
      float* row = s + size_t(n) * KB;
      float& m = ml[32 * i + n];
      float& l = ml[32 * i + 16 + n];
      // The block's max in two running maxima (exact in any order).
      __m512 bm[2] = {neg_inf, neg_inf};
      if (q < t.n && t.q[q]) {
        const int nk = t.n_keys[q], fk = t.first_key[q];
        const __m512i nkv = _mm512_set1_epi32(nk), fkv = _mm512_set1_epi32(fk);
        for (int v = 0; v < 2 * nc; v += 2)
#pragma GCC unroll 2
          for (int u = 0; u < 2; ++u) {
            const int j = j0 + 16 * (v + u);
            __m512 x = _mm512_mul_ps(_mm512_load_ps(row + 16 * (v + u)), sc);
            // Past the query's keys or before its window: -inf there (an exact zero after exp).
            if (j < fk || j + 16 > nk) {
              const __m512i at = _mm512_add_epi32(_mm512_set1_epi32(j), iota);
              x = _mm512_mask_blend_ps(
                  _mm512_cmpgt_epi32_mask(nkv, at) & _mm512_cmple_epi32_mask(fkv, at), neg_inf, x);
            }
            bm[u] = _mm512_max_ps(bm[u], x);
            _mm512_store_ps(row + 16 * (v + u), x);
          }
      }
      const float mb = _mm512_reduce_max_ps(_mm512_max_ps(bm[0], bm[1]));
      if (mb == -INFINITY) {  // no key here: probabilities 0, max and sum as they were
        for (int cc = 0; cc < nc; ++cc) {
          _mm512_store_si512(p + size_t(cc) * 1024 + 32 * n, _mm512_setzero_si512());
          _mm512_store_si512(p + size_t(cc) * 1024 + 512 + 32 * n, _mm512_setzero_si512());
        }
        continue;
      }
      if (mb > m) {
        // exp(old - new) (0 where the old max was -inf: nothing seen yet, sum and outputs 0).
        const float alpha = _mm512_cvtss_f32(exp512_nonpositive(_mm512_set1_ps(m - mb)));
        l *= alpha;
        const __m512 w = _mm512_set1_ps(alpha);
        float* on = ob + size_t(i) * ob_floats + size_t(n) * HD;
        for (int d = 0; d < HD; d += 16)
          _mm512_store_ps(on + d, _mm512_mul_ps(_mm512_load_ps(on + d), w));
        m = mb;
      }
      const __m512 mv = _mm512_set1_ps(m);
      __m512 sum = _mm512_setzero_ps();
      for (int cc = 0; cc < nc; ++cc) {
        const __m512 p0 = exp512_nonpositive(_mm512_sub_ps(_mm512_load_ps(row + 32 * cc), mv));
        const __m512 p1 = exp512_nonpositive(_mm512_sub_ps(_mm512_load_ps(row + 32 * cc + 16), mv));
        sum = _mm512_add_ps(_mm512_add_ps(sum, p0), p1);
        // p as hi (cut to bf16) + lo (the rest, rounded to the nearest bf16 by the conversion).
        const __m512i h0 = _mm512_and_si512(_mm512_castps_si512(p0), top);
        const __m512i h1 = _mm512_and_si512(_mm512_castps_si512(p1), top);
        const __m512 r0 = _mm512_sub_ps(p0, _mm512_castsi512_ps(h0));
        const __m512 r1 = _mm512_sub_ps(p1, _mm512_castsi512_ps(h1));
        _mm512_store_si512(p + size_t(cc) * 1024 + 32 * n, bf16_join(h0, h1));
        _mm512_store_si512(p + size_t(cc) * 1024 + 512 + 32 * n,
                           __m512i(_mm512_cvtne2ps_pbh(r1, r0)));
      }
      l += _mm512_reduce_add_ps(sum);
    }
  };

  // Outputs of q-tiles [i0, i1) += P V over nc chunks: two q-tiles x 16 dimensions, or a lone
  // q-tile x 32 dimensions, at a time.
  auto outputs = [&](int i0, int i1, const BlockRows& r, int nc) {
    for (int i = i0; i < i1; i += 2) {
      float* o0 = ob + size_t(i) * ob_floats;
      const uint16_t* p0 = pb + size_t(i & 1) * pb_elems;
      if (i + 1 < i1) {
        float* o1 = o0 + ob_floats;
        const uint16_t* p1 = p0 + pb_elems;
        for (int d = 0; d < HD; d += 16) {
          _tile_loadd(0, o0 + d, o_stride);
          _tile_loadd(1, o1 + d, o_stride);
          for (int cc = 0; cc < nc; ++cc) {
            const size_t at = size_t(cc * CH / 2) * HD * 2 + size_t(d) * 2;
            _tile_loadd(6, r.vhi + at, v_stride);
            _tile_loadd(7, r.vlo + at, v_stride);
            _tile_loadd(4, p0 + size_t(cc) * 1024, 64);
            _tile_loadd(5, p0 + size_t(cc) * 1024 + 512, 64);
            _tile_loadd(2, p1 + size_t(cc) * 1024, 64);
            _tile_loadd(3, p1 + size_t(cc) * 1024 + 512, 64);
            FAK_AMX_DP3(0, 4, 5, 6, 7);
            FAK_AMX_DP3(1, 2, 3, 6, 7);
          }
          _tile_stored(0, o0 + d, o_stride);
          _tile_stored(1, o1 + d, o_stride);
        }
      } else {
        for (int d = 0; d < HD; d += 32) {
          _tile_loadd(0, o0 + d, o_stride);
          _tile_loadd(1, o0 + d + 16, o_stride);
          for (int cc = 0; cc < nc; ++cc) {
            const size_t at = size_t(cc * CH / 2) * HD * 2 + size_t(d) * 2;
            _tile_loadd(4, p0 + size_t(cc) * 1024, 64);
            _tile_loadd(5, p0 + size_t(cc) * 1024 + 512, 64);
            _tile_loadd(6, r.vhi + at, v_stride);
            _tile_loadd(7, r.vlo + at, v_stride);
            _tile_loadd(2, r.vhi + at + 32, v_stride);
            _tile_loadd(3, r.vlo + at + 32, v_stride);
            FAK_AMX_DP3(0, 4, 5, 6, 7);
            FAK_AMX_DP3(1, 4, 5, 2, 3);
          }
          _tile_stored(0, o0 + d, o_stride);
          _tile_stored(1, o0 + d + 16, o_stride);
        }
      }
    }
  };

  amx_use_config(full_tiles_config());
  // A block all q-tiles read from the same rows is converted one block ahead of its use, so its
  // stores are long done when its tiles load them (a tile load waits for stores to the same
  // lines to retire); converting asks for the block after from memory.
  auto common = [&](int b) { return block_end(b, n_max) <= shared; };
  BlockRows next{};
  if (common(b0)) next = convert(rows, n_max, b0 * KB, block_end(b0, n_max), b0 & 1, QT);
  for (int b = b0; b < b1; ++b) {
    const int j0 = b * KB;
    if (common(b)) {
      const int j1 = block_end(b, n_max);
      const BlockRows cur = next;
      if (b + 1 < b1 && common(b + 1))
        next = convert(rows, n_max, j0 + KB, block_end(b + 1, n_max), (b + 1) & 1, QT);
      // A pair of q-tiles at a time through scores, softmax and outputs: their scores and
      // probabilities (two slots, 32 KB) stay in L1 from one step to the next.
      for (int i = 0; i < QT; i += 2) {
        const int i1 = i + 2 < QT ? i + 2 : QT;
        scores(i, i1, cur, j1 - j0);
        for (int k = i; k < i1; ++k) softmax(k, j0, j1);
        outputs(i, i1, cur, (j1 - j0) / CH);
      }
      continue;
    }
    // A grouped unit's own blocks: each sequence's q-tile over its own rows, as it would run
    // alone (blocks past its keys change nothing for it and are skipped).
    for (int i = 0; i < QT; ++i) {
      const int n = tile_keys[i];
      if (j0 >= n) continue;
      const int j1 = block_end(b, n);
      const BlockRows cur = convert(t.tile_rows[i], n, j0, j1, i & 1, 1);
      scores(i, i + 1, cur, j1 - j0);
      softmax(i, j0, j1);
      outputs(i, i + 1, cur, (j1 - j0) / CH);
    }
  }

  for (int i = 0; i < QT; ++i) {
    alignas(64) float inv[16];
    _mm512_store_ps(inv, _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_load_ps(ml + 32 * i + 16)));
    const float* o = ob + size_t(i) * ob_floats;
    for (int n = 0; n < 16 && 16 * i + n < t.n; ++n) {
      if (!t.out[16 * i + n]) continue;  // a grouped unit's unused lane
      const __m512 w = _mm512_set1_ps(inv[n]);
      for (int d = 0; d < HD; d += 16)
        _mm512_storeu_ps(t.out[16 * i + n] + d,
                         _mm512_mul_ps(_mm512_load_ps(o + size_t(n) * HD + d), w));
    }
  }
}

#undef FAK_AMX_DP3

}  // namespace

void attend_unit_amx(const AmxUnit& unit, const KvRows& rows, int first_stored, int head_dim,
                     float scale) {
  switch (head_dim) {
    case 32:
      return unit_amx<32>(unit, rows, first_stored, scale);
    case 64:
      return unit_amx<64>(unit, rows, first_stored, scale);
    case 128:
      return unit_amx<128>(unit, rows, first_stored, scale);
    default:
      return unit_amx<256>(unit, rows, first_stored, scale);
  }
}

}  // namespace fak::kernels
