// AMX-BF16 attention (ops/attention_kernels.h says what the arithmetic is and why a query's bits
// depend only on its own query and keys). A unit of up to 128 queries of one KV head, in q-tiles
// of 16 query lanes, goes over the keys in blocks of 128 counted from key 0:
//
//  1. The block's rows are converted into the tile layouts (K rows, V rows in pairs of keys, each
//     element as bf16 hi + lo), one block ahead of their use.
//  2. Scores as keys x queries: C tiles (16 keys x 16 queries, f32) take K_hi Q_hi + K_hi Q_lo +
//     K_lo Q_hi per 32 dimensions (A: 16 key rows; B: the queries' dimensions in pairs, made once
//     per unit), then are scaled and masked: a row of 16 query lanes per key.
//  3. Per q-tile: the block's max; where a lane's max grew, its sum and outputs are rescaled by
//     exp(old - new); p = exp(s - max), the lanes' sums in key order, p as bf16 hi + lo
//     transposed into A tiles (a query's 32 probabilities per line).
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

// Eight tiles of 16 lines x 64 bytes: C in 0-3, A in 2-3 / 4-5 / 6-7 as each step names them.
const AmxTileConfig& attention_tile_config() {
  static const AmxTileConfig config = [] {
    AmxTileConfig c;
    for (int t = 0; t < 8; ++t) {
      c.bytes_per_row[t] = 64;
      c.rows[t] = 16;
    }
    return c;
  }();
  return config;
}

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

// The bf16 numbers of 16 such values as a row of 16.
[[gnu::always_inline]] inline __m256i bf16_row(__m512i x) {
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(x, 16));
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

// Keys [j0, j1) (both even) into the tile layouts: K rows at k_hi / k_lo + (j - j0) * HD, V pairs
// at v_hi / v_lo + (j - j0) / 2 * 2 HD (dimension d's two values at 2 d); keys outside
// [first, n_stored) (rows a window dropped, rows past the last) are zeros.
template <int HD, bool F16>
void convert_kv(const KvRows& rows, int first, int n_stored, int j0, int j1, uint16_t* k_hi,
                uint16_t* k_lo, uint16_t* v_hi, uint16_t* v_lo) {
  const SplitBf16 zero{_mm512_setzero_si512(), _mm512_setzero_si512()};
  for (int j = j0; j < j1; j += 2) {
    const bool has0 = j >= first && j < n_stored, has1 = j + 1 >= first && j + 1 < n_stored;
    const uint8_t* k0 = has0 ? rows.k[j] + rows.head_offset : nullptr;
    const uint8_t* k1 = has1 ? rows.k[j + 1] + rows.head_offset : nullptr;
    const uint8_t* v0 = has0 ? rows.v[j] + rows.head_offset : nullptr;
    const uint8_t* v1 = has1 ? rows.v[j + 1] + rows.head_offset : nullptr;
    uint16_t* kh = k_hi + size_t(j - j0) * HD;
    uint16_t* kl = k_lo + size_t(j - j0) * HD;
    uint16_t* vh = v_hi + size_t(j - j0) * HD;  // pair (j - j0) / 2, 2 HD elements a pair
    uint16_t* vl = v_lo + size_t(j - j0) * HD;
    // The rows a block further on, asked for from memory one pair at a time: a decode step reads
    // each row once, and a block's worth of requests at once stalled the core.
    if (j + kAmxKeyBlock + 1 < n_stored)
      for (int r = j + kAmxKeyBlock; r < j + kAmxKeyBlock + 2; ++r)
        for (int e = 0; e < 2 * HD; e += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(rows.k[r] + rows.head_offset) + e,
                       _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(rows.v[r] + rows.head_offset) + e,
                       _MM_HINT_T0);
        }
#pragma GCC unroll 16
    for (int d = 0; d < HD; d += 32) {
      // K: 32 dimensions of each row, hi and lo, one conversion each (exact: both are bf16).
      for (int r = 0; r < 2; ++r) {
        const bool has = r == 0 ? has0 : has1;
        const uint8_t* k = r == 0 ? k0 : k1;
        const SplitBf16 x = has ? split_bf16(load16(k, d, F16)) : zero;
        const SplitBf16 y = has ? split_bf16(load16(k, d + 16, F16)) : zero;
        _mm512_storeu_si512(kh + size_t(r) * HD + d, bf16_join(x.hi, y.hi));
        _mm512_storeu_si512(kl + size_t(r) * HD + d, bf16_join(x.lo, y.lo));
      }
      // V: each dimension's two values side by side, hi and lo.
      for (int h = 0; h < 32; h += 16) {
        const SplitBf16 c = has0 ? split_bf16(load16(v0, d + h, F16)) : zero;
        const SplitBf16 e = has1 ? split_bf16(load16(v1, d + h, F16)) : zero;
        _mm512_storeu_si512(vh + 2 * (d + h), bf16_pairs(c.hi, e.hi));
        _mm512_storeu_si512(vl + 2 * (d + h), bf16_pairs(c.lo, e.lo));
      }
    }
  }
}

template <int HD>
void convert_kv(const KvRows& rows, int first, int n_stored, int j0, int j1, uint16_t* k_hi,
                uint16_t* k_lo, uint16_t* v_hi, uint16_t* v_lo) {
  if (rows.dtype == DType::F16)
    convert_kv<HD, true>(rows, first, n_stored, j0, j1, k_hi, k_lo, v_hi, v_lo);
  else
    convert_kv<HD, false>(rows, first, n_stored, j0, j1, k_hi, k_lo, v_hi, v_lo);
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

// The queries of q-tile i (t.q[16 i ...], absent ones zeros) as B tiles: for each 32 dimensions c,
// line r holds for query n its dimensions 32c + 2r and 32c + 2r + 1, hi parts in one tile (1 KB)
// and lo parts in the next.
template <int HD>
void query_tiles(const AmxUnit& t, int i, uint16_t* qb) {
  alignas(64) uint16_t qh[16][HD], ql[16][HD];
  for (int n = 0; n < 16; ++n)
    for (int d = 0; d < HD; d += 16) {
      SplitBf16 sp{_mm512_setzero_si512(), _mm512_setzero_si512()};
      if (16 * i + n < t.n && t.q[16 * i + n])
        sp = split_bf16_rounded(_mm512_loadu_ps(t.q[16 * i + n] + d));
      _mm256_store_si256(reinterpret_cast<__m256i*>(&qh[n][d]), bf16_row(sp.hi));
      _mm256_store_si256(reinterpret_cast<__m256i*>(&ql[n][d]), bf16_row(sp.lo));
    }
  for (int c = 0; c < HD / 32; ++c) {
    __m512i zh[16], zl[16];
    for (int n = 0; n < 16; ++n) {
      zh[n] = _mm512_load_si512(&qh[n][32 * c]);
      zl[n] = _mm512_load_si512(&ql[n][32 * c]);
    }
    transpose16(zh);
    transpose16(zl);
    for (int r = 0; r < 16; ++r) {
      _mm512_store_si512(qb + size_t(2 * c) * 512 + 32 * r, zh[r]);
      _mm512_store_si512(qb + size_t(2 * c + 1) * 512 + 32 * r, zl[r]);
    }
  }
}

// A unit of up to kAmxUnitQueries queries of one KV head (q-tiles of 16 lanes) over key blocks of
// kAmxKeyBlock counted from key 0 (attention_kernels.h): per block the scores, each lane's running
// max updated once (its sum and outputs rescaled by exp(old - new) where it grew), the
// probabilities, and the outputs' products, kept in memory between blocks. Tiles go two at a time
// (two q-tiles, or for a lone q-tile two key or dimension tiles) so that one pair's products run
// while the other's operands load: a tile register is reloaded only after the products reading it.
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
  // Scratch: per q-tile the queries' B tiles, a block's scores (a row of 16 lanes per key), its
  // probabilities' A tiles (per chunk: hi, lo), the outputs [16][HD], the lanes' max and sum; then
  // two blocks of K rows and V pairs (one converted while the other is read).
  const size_t qb_elems = size_t(HD / 32) * 1024, pb_elems = size_t(KB / CH) * 1024;
  const size_t sb_floats = size_t(KB) * 16, ob_floats = size_t(16) * HD;
  const size_t kv_elems = size_t(KB) * HD * 4;
  const size_t bytes =
      size_t(QT) * (2 * qb_elems + 4 * sb_floats + 2 * pb_elems + 4 * ob_floats + 4 * 32) +
      2 * 2 * kv_elems;
  auto* qb = static_cast<uint16_t*>(thread_scratch(ScratchSlot::kAttention, bytes));
  auto* sb = reinterpret_cast<float*>(qb + size_t(QT) * qb_elems);
  auto* pb = reinterpret_cast<uint16_t*>(sb + size_t(QT) * sb_floats);
  auto* ob = reinterpret_cast<float*>(pb + size_t(QT) * pb_elems);
  float* ml = ob + size_t(QT) * ob_floats;  // per q-tile: max[16], sum[16]
  auto* kvb = reinterpret_cast<uint16_t*>(ml + size_t(QT) * 32);

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

  // Keys [j0, j1) of `from` (stored up to key n) into buffer `slot`'s K rows and V pairs.
  struct BlockRows {
    const uint16_t *khi, *klo, *vhi, *vlo;  // key j0's K row, its V pair
  };
  auto convert = [&](const KvRows& from, int n, int j0, int j1, int slot) {
    uint16_t* kh = kvb + size_t(slot) * kv_elems;
    convert_kv<HD>(from, first_stored, n, j0, j1, kh, kh + size_t(KB) * HD,
                   kh + 2 * size_t(KB) * HD, kh + 3 * size_t(KB) * HD);
    return BlockRows{kh, kh + size_t(KB) * HD, kh + 2 * size_t(KB) * HD, kh + 3 * size_t(KB) * HD};
  };
  const long k_stride = long(HD) * 2, v_stride = long(HD) * 4, o_stride = long(HD) * 4;

  // Scores of q-tiles [i0, i1) over keys [j0, j1): two q-tiles x 16 keys, or a lone q-tile x 32
  // keys, at a time.
  auto scores = [&](int i0, int i1, const BlockRows& r, int n_keys) {
    for (int i = i0; i < i1; i += 2) {
      const uint16_t* q0 = qb + size_t(i) * qb_elems;
      float* s0 = sb + size_t(i) * sb_floats;
      if (i + 1 < i1) {
        const uint16_t* q1 = q0 + qb_elems;
        for (int k0 = 0; k0 < n_keys; k0 += 16) {
          _tile_zero(0);
          _tile_zero(1);
#pragma GCC unroll 8
          for (int c = 0; c < HD / 32; ++c) {
            _tile_loadd(4, r.khi + size_t(k0) * HD + 32 * c, k_stride);
            _tile_loadd(5, r.klo + size_t(k0) * HD + 32 * c, k_stride);
            _tile_loadd(6, q0 + size_t(c) * 1024, 64);
            _tile_loadd(7, q0 + size_t(c) * 1024 + 512, 64);
            _tile_loadd(2, q1 + size_t(c) * 1024, 64);
            _tile_loadd(3, q1 + size_t(c) * 1024 + 512, 64);
            FAK_AMX_DP3(0, 4, 5, 6, 7);
            FAK_AMX_DP3(1, 4, 5, 2, 3);
          }
          _tile_stored(0, s0 + size_t(k0) * 16, 64);
          _tile_stored(1, s0 + sb_floats + size_t(k0) * 16, 64);
        }
      } else {
        for (int k0 = 0; k0 < n_keys; k0 += 32) {
          _tile_zero(0);
          _tile_zero(1);
#pragma GCC unroll 8
          for (int c = 0; c < HD / 32; ++c) {
            _tile_loadd(6, q0 + size_t(c) * 1024, 64);
            _tile_loadd(7, q0 + size_t(c) * 1024 + 512, 64);
            _tile_loadd(4, r.khi + size_t(k0) * HD + 32 * c, k_stride);
            _tile_loadd(5, r.klo + size_t(k0) * HD + 32 * c, k_stride);
            _tile_loadd(2, r.khi + size_t(k0 + 16) * HD + 32 * c, k_stride);
            _tile_loadd(3, r.klo + size_t(k0 + 16) * HD + 32 * c, k_stride);
            FAK_AMX_DP3(0, 4, 5, 6, 7);
            FAK_AMX_DP3(1, 2, 3, 6, 7);
          }
          _tile_stored(0, s0 + size_t(k0) * 16, 64);
          _tile_stored(1, s0 + size_t(k0 + 16) * 16, 64);
        }
      }
    }
  };

  // Q-tile i over keys [j0, j1): mask and scale, the block's max, the rescale, the
  // probabilities' A tiles.
  auto softmax = [&](int i, int j0, int j1) {
    float* s = sb + size_t(i) * sb_floats;
    alignas(64) int32_t keys[16], first[16];
    for (int n = 0; n < 16; ++n) {
      const int q = 16 * i + n;
      keys[n] = q < t.n ? t.n_keys[q] : n_max;
      first[n] = q < t.n ? t.first_key[q] : min_first;
    }
    const __m512i nk = _mm512_load_si512(keys), fk = _mm512_load_si512(first);
    // The block's max in four running maxima (exact in any order): one chain waited on each
    // row's max in turn.
    __m512 bm[4] = {neg_inf, neg_inf, neg_inf, neg_inf};
    for (int k = 0; k < j1 - j0; k += 4)
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) {
        __m512 x = _mm512_mul_ps(_mm512_load_ps(s + 16 * (k + u)), sc);
        const int j = j0 + k + u;
        // Past a lane's keys or before its window: -inf there (an exact zero after exp).
        if (j >= min_keys || j < max_first) {
          const __m512i at = _mm512_set1_epi32(j);
          x = _mm512_mask_blend_ps(
              _mm512_cmpgt_epi32_mask(nk, at) & _mm512_cmple_epi32_mask(fk, at), neg_inf, x);
        }
        bm[u] = _mm512_max_ps(bm[u], x);
        _mm512_store_ps(s + 16 * (k + u), x);
      }
    const __m512 m = _mm512_load_ps(ml + 32 * i);
    __m512 l = _mm512_load_ps(ml + 32 * i + 16);
    const __m512 mn =
        _mm512_max_ps(m, _mm512_max_ps(_mm512_max_ps(bm[0], bm[1]), _mm512_max_ps(bm[2], bm[3])));
    // Lanes with a finite max (the others have seen no key yet: nothing to rescale or add).
    const __mmask16 live = _mm512_cmp_ps_mask(mn, neg_inf, _CMP_NEQ_OQ);
    const __mmask16 grew = _mm512_cmp_ps_mask(mn, m, _CMP_GT_OQ) & live;
    if (grew) {
      const __m512 alpha = _mm512_mask_blend_ps(grew, _mm512_set1_ps(1.0f),
                                                exp512_nonpositive(_mm512_sub_ps(m, mn)));
      l = _mm512_mul_ps(l, alpha);
      alignas(64) float a[16];
      _mm512_store_ps(a, alpha);
      float* o = ob + size_t(i) * ob_floats;
      for (int n = 0; n < 16; ++n) {
        if (((grew >> n) & 1) == 0) continue;
        const __m512 w = _mm512_set1_ps(a[n]);
        float* on = o + size_t(n) * HD;
        for (int d = 0; d < HD; d += 16)
          _mm512_store_ps(on + d, _mm512_mul_ps(_mm512_load_ps(on + d), w));
      }
    }
    uint16_t* p = pb + size_t(i) * pb_elems;
    for (int cc = 0; cc < (j1 - j0) / CH; ++cc) {
      __m512i zh[16], zl[16];
#pragma GCC unroll 4
      for (int r = 0; r < 16; ++r) {
        const float* sr = s + size_t(cc * CH + 2 * r) * 16;
        const __m512 p0 =
            _mm512_maskz_mov_ps(live, exp512_nonpositive(_mm512_sub_ps(_mm512_load_ps(sr), mn)));
        l = _mm512_add_ps(l, p0);
        const __m512 p1 = _mm512_maskz_mov_ps(
            live, exp512_nonpositive(_mm512_sub_ps(_mm512_load_ps(sr + 16), mn)));
        l = _mm512_add_ps(l, p1);
        const SplitBf16 x0 = split_bf16_rounded(p0), x1 = split_bf16_rounded(p1);
        zh[r] = bf16_pairs(x0.hi, x1.hi);
        zl[r] = bf16_pairs(x0.lo, x1.lo);
      }
      transpose16(zh);
      transpose16(zl);
      uint16_t* pc = p + size_t(cc) * 1024;
      for (int n = 0; n < 16; ++n) {
        _mm512_store_si512(pc + 32 * n, zh[n]);
        _mm512_store_si512(pc + 512 + 32 * n, zl[n]);
      }
    }
    _mm512_store_ps(ml + 32 * i, mn);
    _mm512_store_ps(ml + 32 * i + 16, l);
  };

  // Outputs of q-tiles [i0, i1) += P V over nc chunks: two q-tiles x 16 dimensions, or a lone
  // q-tile x 32 dimensions, at a time.
  auto outputs = [&](int i0, int i1, const BlockRows& r, int nc) {
    for (int i = i0; i < i1; i += 2) {
      float* o0 = ob + size_t(i) * ob_floats;
      const uint16_t* p0 = pb + size_t(i) * pb_elems;
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

  amx_use_config(attention_tile_config());
  // A block all q-tiles read from the same rows is converted one block ahead of its use, so its
  // stores are long done when its tiles load them (a tile load waits for stores to the same
  // lines to retire); converting asks for the block after from memory.
  auto common = [&](int b) { return block_end(b, n_max) <= shared; };
  BlockRows next{};
  if (common(b0)) next = convert(rows, n_max, b0 * KB, block_end(b0, n_max), b0 & 1);
  for (int b = b0; b < b1; ++b) {
    const int j0 = b * KB;
    if (common(b)) {
      const int j1 = block_end(b, n_max);
      const BlockRows cur = next;
      if (b + 1 < b1 && common(b + 1))
        next = convert(rows, n_max, j0 + KB, block_end(b + 1, n_max), (b + 1) & 1);
      scores(0, QT, cur, j1 - j0);
      for (int i = 0; i < QT; ++i) softmax(i, j0, j1);
      outputs(0, QT, cur, (j1 - j0) / CH);
      continue;
    }
    // A grouped unit's own blocks: each sequence's q-tile over its own rows, as it would run
    // alone (blocks past its keys change nothing for it and are skipped).
    for (int i = 0; i < QT; ++i) {
      const int n = tile_keys[i];
      if (j0 >= n) continue;
      const int j1 = block_end(b, n);
      const BlockRows cur = convert(t.tile_rows[i], n, j0, j1, i & 1);
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
