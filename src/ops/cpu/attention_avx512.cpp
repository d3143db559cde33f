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

template <int HD, int NV>
void attend_tile16(const AttentionTile& t, const KvRows& rows, float scale) {
  constexpr int L = 16 * NV;
  int n_keys = 0, min_keys = 1 << 30;
  for (int i = 0; i < t.n; ++i) {
    n_keys = t.n_keys[i] > n_keys ? t.n_keys[i] : n_keys;
    min_keys = t.n_keys[i] < min_keys ? t.n_keys[i] : min_keys;
  }
  const bool half = rows.dtype != DType::F32;
  const size_t need = size_t(2 * HD * L) + size_t(n_keys) * L + (half ? size_t(kKeyBlock) * HD : 0);
  auto* buf = static_cast<float*>(thread_scratch(ScratchSlot::kAttention, sizeof(float) * need));
  float* qt = buf;          // [HD][L]: queries transposed
  float* ot = qt + HD * L;  // [HD][L]: outputs transposed
  float* s = ot + HD * L;   // [n_keys][L]: scores, then probabilities
  float* conv = s + size_t(n_keys) * L;

  alignas(64) int32_t lane_keys[L], lane_first[L];
  int max_first = 0;
  for (int i = 0; i < L; ++i) {
    lane_keys[i] = i < t.n ? t.n_keys[i] : n_keys;
    lane_first[i] = i < t.n ? t.first_key[i] : 0;
    max_first = lane_first[i] > max_first ? lane_first[i] : max_first;
  }
  __m512i nk[NV], fk[NV];
  for (int v = 0; v < NV; ++v) {
    nk[v] = _mm512_load_si512(lane_keys + 16 * v);
    fk[v] = _mm512_load_si512(lane_first + 16 * v);
  }
  for (int d = 0; d < HD; ++d)
    for (int i = 0; i < L; ++i) qt[d * L + i] = i < t.n ? t.q[i][d] : 0.0f;

  // Pass 1: scores and their max.
  constexpr int KB = 8;
  const float* kp[kKeyBlock];
  // A lane's max starts at its sink and its sum at exp(sink - max): -inf and +0 without one.
  alignas(64) float lane_sink[L];
  for (int i = 0; i < L; ++i) lane_sink[i] = i < t.n ? t.sink[i] : -INFINITY;
  __m512 mx[NV];
  for (int v = 0; v < NV; ++v) mx[v] = _mm512_load_ps(lane_sink + 16 * v);
  for (int j0 = 0; j0 < n_keys; j0 += kKeyBlock) {
    const int j1 = j0 + kKeyBlock < n_keys ? j0 + kKeyBlock : n_keys;
    block_rows<HD>(rows.k, rows.head_offset, rows.dtype, j0, j1, conv, kp);
    int j = j0;
    for (; j + KB <= j1; j += KB)
      scores16<HD, NV, KB>(qt, kp + (j - j0), j, scale, nk, min_keys, fk, max_first, s, mx);
    for (; j < j1; ++j)
      scores16<HD, NV, 1>(qt, kp + (j - j0), j, scale, nk, min_keys, fk, max_first, s, mx);
  }

  // Pass 2, block by block: softmax numerators and their sums in key order per lane, then
  // output += p_j V[j] (dimension chunks of DC, DC * NV accumulators).
  constexpr int DC = HD < 8 ? HD : 8;
  __m512 sum[NV];
  for (int v = 0; v < NV; ++v)
    sum[v] = exp512(_mm512_sub_ps(_mm512_load_ps(lane_sink + 16 * v), mx[v]));
  const float* vp[kKeyBlock];
  for (int j0 = 0; j0 < n_keys; j0 += kKeyBlock) {
    const int j1 = j0 + kKeyBlock < n_keys ? j0 + kKeyBlock : n_keys;
    softmax_numerators<NV>(s, L, j0, j1, mx, sum);
    block_rows<HD>(rows.v, rows.head_offset, rows.dtype, j0, j1, conv, vp);
    for (int d0 = 0; d0 < HD; d0 += DC) {
      __m512 acc[DC][NV];
#pragma GCC unroll 8
      for (int c = 0; c < DC; ++c)
#pragma GCC unroll 3
        for (int v = 0; v < NV; ++v)
          acc[c][v] = j0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(ot + (d0 + c) * L + 16 * v);
      for (int j = j0; j < j1; ++j) {
        __m512 p[NV];
#pragma GCC unroll 3
        for (int v = 0; v < NV; ++v) p[v] = _mm512_loadu_ps(s + size_t(j) * L + 16 * v);
        const float* vr = vp[j - j0] + d0;
#pragma GCC unroll 8
        for (int c = 0; c < DC; ++c) {
          const __m512 x = _mm512_set1_ps(vr[c]);
#pragma GCC unroll 3
          for (int v = 0; v < NV; ++v) acc[c][v] = _mm512_fmadd_ps(p[v], x, acc[c][v]);
        }
      }
#pragma GCC unroll 8
      for (int c = 0; c < DC; ++c)
#pragma GCC unroll 3
        for (int v = 0; v < NV; ++v) _mm512_storeu_ps(ot + (d0 + c) * L + 16 * v, acc[c][v]);
    }
  }

  alignas(64) float inv[L];
  for (int v = 0; v < NV; ++v)
    _mm512_store_ps(inv + 16 * v, _mm512_div_ps(_mm512_set1_ps(1.0f), sum[v]));
  for (int i = 0; i < t.n; ++i)
    for (int d = 0; d < HD; ++d) t.out[i][d] = ot[d * L + i] * inv[i];
}

template <int HD>
void attend_tile_hd(const AttentionTile& t, const KvRows& rows, float scale) {
  if (t.n <= 16)
    attend_tile16<HD, 1>(t, rows, scale);
  else if (t.n <= 32)
    attend_tile16<HD, 2>(t, rows, scale);
  else
    attend_tile16<HD, 3>(t, rows, scale);
}

}  // namespace

bool attend_tile_avx512(const AttentionTile& tile, const KvRows& rows, int head_dim, float scale,
                        AttentionScratch& scratch) {
  if (tile.n <= 8) return attend_tile_avx2(tile, rows, head_dim, scale, scratch);
  switch (head_dim) {
    case 16:
      attend_tile_hd<16>(tile, rows, scale);
      return true;
    case 32:
      attend_tile_hd<32>(tile, rows, scale);
      return true;
    case 64:
      attend_tile_hd<64>(tile, rows, scale);
      return true;
    case 128:
      attend_tile_hd<128>(tile, rows, scale);
      return true;
    case 256:
      attend_tile_hd<256>(tile, rows, scale);
      return true;
    default:
      return false;
  }
}

}  // namespace fak::kernels
