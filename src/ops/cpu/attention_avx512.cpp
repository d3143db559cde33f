// AVX-512 prefill attention tile: the AVX2 tile's arithmetic (attention_avx2.cpp) with 16 query
// lanes per register, for tiles of 9..48 queries of one sequence (one to three registers): each K
// and V element costs one fma per 16 lanes instead of per 8. (Decode steps go to
// attention_decode_avx512.cpp.)
//
// note: every lane does exactly the AVX2 lane's operations in the same order (the score is one fma
// chain over the head dimension, the same exp polynomial, the softmax sum and the output in key
// order, one division), so the outputs are the same bits as attend_tile_avx2 (tested). A tile of
// up to 8 queries goes to the AVX2 kernel: half the lanes would be idle.
#include <immintrin.h>

#include <cmath>
#include <type_traits>

#include "core/avx512_warnings.h"  // first: before the intrinsics headers
#include "ops/attention_kernels.h"
#include "ops/cpu/attention_rows.h"
#include "ops/cpu/exp_avx512.h"
#include "ops/scratch.h"

namespace fak::kernels {

namespace {

constexpr int kKeyBlock = 64;

// Scores of KB keys starting at key j for the 16 * NV lanes, scaled, causally masked (a lane's
// keys past its own count are -inf, so they add exact zeros to its sum and output), and the lanes'
// running max (exact wherever it is taken). Several registers of queries per broadcast K element
// cut the loads per fma: with one, the load ports and not the fma units set the pace.
template <int HD, int NV, int KB>
[[gnu::always_inline]] inline void scores16(const float* qt, const float* const* k, int j,
                                            float scale, const __m512i* n_keys, int min_keys,
                                            const __m512i* first, int max_first, float* s,
                                            __m512* mx) {
  constexpr int L = 16 * NV;
  __m512 acc[KB][NV];
#pragma GCC unroll 8
  for (int b = 0; b < KB; ++b)
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) acc[b][v] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int d = 0; d < HD; ++d) {
    __m512 q[NV];
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) q[v] = _mm512_loadu_ps(qt + d * L + 16 * v);
#pragma GCC unroll 8
    for (int b = 0; b < KB; ++b) {
      const __m512 kb = _mm512_set1_ps(k[b][d]);
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) acc[b][v] = _mm512_fmadd_ps(q[v], kb, acc[b][v]);
    }
  }
  const __m512 sc = _mm512_set1_ps(scale), neg_inf = _mm512_set1_ps(-INFINITY);
#pragma GCC unroll 8
  for (int b = 0; b < KB; ++b)
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) {
      __m512 x = _mm512_mul_ps(acc[b][v], sc);
      if (j + b >= min_keys || j + b < max_first) {  // past a lane's keys, or before its first
        const __m512i at = _mm512_set1_epi32(j + b);
        const __mmask16 valid =
            _mm512_cmpgt_epi32_mask(n_keys[v], at) & _mm512_cmple_epi32_mask(first[v], at);
        x = _mm512_mask_blend_ps(valid, neg_inf, x);
      }
      mx[v] = _mm512_max_ps(mx[v], x);
      _mm512_storeu_ps(s + size_t(j + b) * L + 16 * v, x);
    }
}

// One tile's lanes: its transposed queries and outputs, its score rows, its masks and its softmax's
// running max and sum.
template <int NV>
struct TileLanes {
  float* qt;  // [HD][L]
  float* ot;  // [HD][L]
  float* s;   // [n_keys][L]: scores, then probabilities
  int n_keys = 0, min_keys = 1 << 30, max_first = 0;
  __m512i nk[NV], fk[NV];
  __m512 mx[NV], sum[NV];
  alignas(64) float sink[16 * NV];
};

// `count` tiles of full registers over the same rows (one sequence, one KV head): each key block
// is widened once for all of them, then each tile runs its own lanes over it. A tile's lanes see
// the same keys in the same order as when it runs alone, so the bits are the same.
template <int HD, int NV>
void attend_tiles16(const AttentionTile* tiles, int count, const KvRows& rows, float scale) {
  constexpr int L = 16 * NV;
  const bool half = rows.dtype != DType::F32;
  TileLanes<NV> lanes[kMaxTilesPerUnit];
  int n_keys = 0;
  size_t need = half ? size_t(kKeyBlock) * HD : 0;
  for (int c = 0; c < count; ++c) {
    const AttentionTile& t = tiles[c];
    TileLanes<NV>& tl = lanes[c];
    for (int i = 0; i < t.n; ++i) {
      tl.n_keys = t.n_keys[i] > tl.n_keys ? t.n_keys[i] : tl.n_keys;
      tl.min_keys = t.n_keys[i] < tl.min_keys ? t.n_keys[i] : tl.min_keys;
    }
    n_keys = tl.n_keys > n_keys ? tl.n_keys : n_keys;
    need += size_t(2 * HD * L) + size_t(tl.n_keys) * L;
  }
  auto* buf = static_cast<float*>(thread_scratch(ScratchSlot::kAttention, sizeof(float) * need));
  float* conv = buf;  // a key block's rows as f32, when they are not
  float* next = buf + (half ? size_t(kKeyBlock) * HD : 0);
  for (int c = 0; c < count; ++c) {
    const AttentionTile& t = tiles[c];
    TileLanes<NV>& tl = lanes[c];
    tl.qt = next;
    tl.ot = tl.qt + HD * L;
    tl.s = tl.ot + HD * L;
    next = tl.s + size_t(tl.n_keys) * L;
    alignas(64) int32_t lane_keys[L], lane_first[L];
    for (int i = 0; i < L; ++i) {
      lane_keys[i] = i < t.n ? t.n_keys[i] : tl.n_keys;
      lane_first[i] = i < t.n ? t.first_key[i] : 0;
      tl.max_first = lane_first[i] > tl.max_first ? lane_first[i] : tl.max_first;
      // A lane's max starts at its sink and its sum at exp(sink - max): -inf and +0 without one.
      tl.sink[i] = i < t.n ? t.sink[i] : -INFINITY;
    }
    for (int v = 0; v < NV; ++v) {
      tl.nk[v] = _mm512_load_si512(lane_keys + 16 * v);
      tl.fk[v] = _mm512_load_si512(lane_first + 16 * v);
      tl.mx[v] = _mm512_load_ps(tl.sink + 16 * v);
    }
    for (int d = 0; d < HD; ++d)
      for (int i = 0; i < L; ++i) tl.qt[d * L + i] = i < t.n ? t.q[i][d] : 0.0f;
  }

  // Pass 1: scores and their max.
  constexpr int KB = 8;
  const float* kp[kKeyBlock];
  for (int j0 = 0; j0 < n_keys; j0 += kKeyBlock) {
    const int j1 = j0 + kKeyBlock < n_keys ? j0 + kKeyBlock : n_keys;
    block_rows<HD>(rows.k, rows.head_offset, rows.dtype, j0, j1, conv, kp);
    for (int c = 0; c < count; ++c) {
      TileLanes<NV>& tl = lanes[c];
      const int je = j1 < tl.n_keys ? j1 : tl.n_keys;
      int j = j0;
      for (; j + KB <= je; j += KB)
        scores16<HD, NV, KB>(tl.qt, kp + (j - j0), j, scale, tl.nk, tl.min_keys, tl.fk,
                             tl.max_first, tl.s, tl.mx);
      for (; j < je; ++j)
        scores16<HD, NV, 1>(tl.qt, kp + (j - j0), j, scale, tl.nk, tl.min_keys, tl.fk, tl.max_first,
                            tl.s, tl.mx);
    }
  }

  // Pass 2, block by block: softmax numerators and their sums in key order per lane, then
  // output += p_j V[j] (dimension chunks of DC, DC * NV accumulators).
  constexpr int DC = HD < 8 ? HD : 8;
  for (int c = 0; c < count; ++c)
    for (int v = 0; v < NV; ++v)
      lanes[c].sum[v] =
          exp512(_mm512_sub_ps(_mm512_load_ps(lanes[c].sink + 16 * v), lanes[c].mx[v]));
  const float* vp[kKeyBlock];
  for (int j0 = 0; j0 < n_keys; j0 += kKeyBlock) {
    const int j1 = j0 + kKeyBlock < n_keys ? j0 + kKeyBlock : n_keys;
    block_rows<HD>(rows.v, rows.head_offset, rows.dtype, j0, j1, conv, vp);
    for (int c = 0; c < count; ++c) {
      TileLanes<NV>& tl = lanes[c];
      if (j0 >= tl.n_keys) continue;
      const int je = j1 < tl.n_keys ? j1 : tl.n_keys;
      const float* s = tl.s;
      float* ot = tl.ot;
      softmax_numerators<NV>(tl.s, L, j0, je, tl.mx, tl.sum);
      for (int d0 = 0; d0 < HD; d0 += DC) {
        __m512 acc[DC][NV];
#pragma GCC unroll 8
        for (int k = 0; k < DC; ++k)
#pragma GCC unroll 3
          for (int v = 0; v < NV; ++v)
            acc[k][v] = j0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(ot + (d0 + k) * L + 16 * v);
        for (int j = j0; j < je; ++j) {
          __m512 p[NV];
#pragma GCC unroll 3
          for (int v = 0; v < NV; ++v) p[v] = _mm512_loadu_ps(s + size_t(j) * L + 16 * v);
          const float* vr = vp[j - j0] + d0;
#pragma GCC unroll 8
          for (int k = 0; k < DC; ++k) {
            const __m512 x = _mm512_set1_ps(vr[k]);
#pragma GCC unroll 3
            for (int v = 0; v < NV; ++v) acc[k][v] = _mm512_fmadd_ps(p[v], x, acc[k][v]);
          }
        }
#pragma GCC unroll 8
        for (int k = 0; k < DC; ++k)
#pragma GCC unroll 3
          for (int v = 0; v < NV; ++v) _mm512_storeu_ps(ot + (d0 + k) * L + 16 * v, acc[k][v]);
      }
    }
  }

  for (int c = 0; c < count; ++c) {
    const AttentionTile& t = tiles[c];
    const TileLanes<NV>& tl = lanes[c];
    alignas(64) float inv[L];
    for (int v = 0; v < NV; ++v)
      _mm512_store_ps(inv + 16 * v, _mm512_div_ps(_mm512_set1_ps(1.0f), tl.sum[v]));
    for (int i = 0; i < t.n; ++i)
      for (int d = 0; d < HD; ++d) t.out[i][d] = tl.ot[d * L + i] * inv[i];
  }
}

template <int HD>
void attend_tile_hd(const AttentionTile& t, const KvRows& rows, float scale) {
  if (t.n <= 16)
    attend_tiles16<HD, 1>(&t, 1, rows, scale);
  else if (t.n <= 32)
    attend_tiles16<HD, 2>(&t, 1, rows, scale);
  else
    attend_tiles16<HD, 3>(&t, 1, rows, scale);
}

// Calls fn(std::integral_constant<int, HD>) for the head sizes the tiles are built for; false for
// any other.
template <class Fn>
bool with_head_dim(int head_dim, Fn&& fn) {
  switch (head_dim) {
    case 16:
      fn(std::integral_constant<int, 16>{});
      return true;
    case 32:
      fn(std::integral_constant<int, 32>{});
      return true;
    case 64:
      fn(std::integral_constant<int, 64>{});
      return true;
    case 128:
      fn(std::integral_constant<int, 128>{});
      return true;
    case 256:
      fn(std::integral_constant<int, 256>{});
      return true;
    default:
      return false;
  }
}

}  // namespace

bool attend_tile_avx512(const AttentionTile& tile, const KvRows& rows, int head_dim, float scale,
                        AttentionScratch& scratch) {
  if (tile.n <= 8) return attend_tile_avx2(tile, rows, head_dim, scale, scratch);
  return with_head_dim(head_dim, [&](auto hd) { attend_tile_hd<hd()>(tile, rows, scale); });
}

bool attend_tiles_avx512(const AttentionTile* tiles, int count, const KvRows& rows, int head_dim,
                         float scale, AttentionScratch& scratch) {
  bool full = count > 1;
  for (int c = 0; c < count; ++c) full = full && tiles[c].n == kTileQueries;
  if (!full) {  // one tile, or a partial one among them: each alone
    for (int c = 0; c < count; ++c)
      if (!attend_tile_avx512(tiles[c], rows, head_dim, scale, scratch)) return false;
    return true;
  }
  static_assert(kTileQueries == 48, "full tiles are three registers of lanes");
  return with_head_dim(head_dim,
                       [&](auto hd) { attend_tiles16<hd(), 3>(tiles, count, rows, scale); });
}

}  // namespace fak::kernels
