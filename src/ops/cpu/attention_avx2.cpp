// AVX2 attention tile: up to 16 queries sharing one KV head, queries in SIMD lanes.
//
// Three passes over the tile's keys (see attention_kernels.h for why lanes never interact):
//   1. scores: for a few keys at a time, one fma per head dimension per key broadcasts K[j][d]
//      against the lanes' query values (a small GEMM, no horizontal sums); causal masking sets a
//      lane's score to -inf for keys past its own position;
//   2. softmax: per lane max, exp (vectorised, see exp256) and the sum in key order;
//   3. values: the output accumulates p_j * V[j][d] in key order with one fma per element, lanes
//      again being queries, then is scaled by 1 / sum once.
// K and V rows are read once per tile, in blocks that stay in L1; f16/bf16 rows are widened into a
// block buffer first.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/attention_kernels.h"
#include "ops/cpu/attention_rows.h"
#include "ops/cpu/exp_avx2.h"

namespace fak::kernels {

namespace {

constexpr int kKeyBlock = 64;

// Scores of KB consecutive keys (starting at key j) for all lanes, scaled and causally masked
// (and before a lane's first key, for windowed tiles: max_first > 0).
template <int HD, int NV, int KB>
inline void scores(const float* qt, const float* const* k, int j, float scale,
                   const __m256i* n_keys, int min_keys, const __m256i* first, int max_first,
                   float* s) {
  constexpr int L = 8 * NV;
  __m256 acc[KB][NV];
#pragma GCC unroll 8
  for (int b = 0; b < KB; ++b)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[b][v] = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int d = 0; d < HD; ++d) {
    __m256 q[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) q[v] = _mm256_loadu_ps(qt + d * L + 8 * v);
#pragma GCC unroll 8
    for (int b = 0; b < KB; ++b) {
      const __m256 kb = _mm256_broadcast_ss(k[b] + d);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[b][v] = _mm256_fmadd_ps(q[v], kb, acc[b][v]);
    }
  }
  const __m256 sc = _mm256_set1_ps(scale), neg_inf = _mm256_set1_ps(-INFINITY);
#pragma GCC unroll 8
  for (int b = 0; b < KB; ++b)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      __m256 x = _mm256_mul_ps(acc[b][v], sc);
      if (j + b >= min_keys || j + b < max_first) {
        const __m256i valid =
            _mm256_and_si256(_mm256_cmpgt_epi32(n_keys[v], _mm256_set1_epi32(j + b)),
                             _mm256_cmpgt_epi32(_mm256_set1_epi32(j + b + 1), first[v]));
        x = _mm256_blendv_ps(neg_inf, x, _mm256_castsi256_ps(valid));
      }
      _mm256_storeu_ps(s + size_t(j + b) * L + 8 * v, x);
    }
}

template <int HD, int NV>
void attend_tile(const AttentionTile& t, const KvRows& rows, float scale,
                 AttentionScratch& scratch) {
  constexpr int L = 8 * NV;
  int n_keys = 0, min_keys = 1 << 30;
  for (int i = 0; i < t.n; ++i) {
    n_keys = std::max(n_keys, t.n_keys[i]);
    min_keys = std::min(min_keys, t.n_keys[i]);
  }
  const bool half = rows.dtype != DType::F32;
  const size_t need = size_t(2 * HD * L) + size_t(n_keys) * L + (half ? size_t(kKeyBlock) * HD : 0);
  if (scratch.buf.size() < need) scratch.buf.resize(need);
  float* qt = scratch.buf.data();  // [HD][L]: queries transposed
  float* ot = qt + HD * L;         // [HD][L]: outputs transposed
  float* s = ot + HD * L;          // [n_keys][L]: scores, then probabilities
  float* conv = s + size_t(n_keys) * L;

  alignas(32) int32_t lane_keys[L], lane_first[L];
  int max_first = 0;
  for (int i = 0; i < L; ++i) {
    lane_keys[i] = i < t.n ? t.n_keys[i] : n_keys;
    lane_first[i] = i < t.n ? t.first_key[i] : 0;
    max_first = std::max(max_first, lane_first[i]);
  }
  __m256i nk[NV], fk[NV];
  for (int v = 0; v < NV; ++v) {
    nk[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(lane_keys + 8 * v));
    fk[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(lane_first + 8 * v));
  }
  for (int d = 0; d < HD; ++d)
    for (int i = 0; i < L; ++i) qt[d * L + i] = i < t.n ? t.q[i][d] : 0.0f;

  // Pass 1: scores. More keys per step with fewer lanes keeps 8 accumulators in flight.
  constexpr int KB = 8 / NV;
  const float* kp[kKeyBlock];
  const size_t row_bytes = dtype_row_bytes(rows.dtype, HD);
  prefetch_rows(rows.k, rows.head_offset, row_bytes, 0, std::min(n_keys, kKeyBlock));
  for (int j0 = 0; j0 < n_keys; j0 += kKeyBlock) {
    const int j1 = std::min(n_keys, j0 + kKeyBlock);
    if (j1 < n_keys)
      prefetch_rows(rows.k, rows.head_offset, row_bytes, j1, std::min(n_keys, j1 + kKeyBlock));
    else
      prefetch_rows(rows.v, rows.head_offset, row_bytes, 0, std::min(n_keys, kKeyBlock));
    block_rows<HD>(rows.k, rows.head_offset, rows.dtype, j0, j1, conv, kp);
    int j = j0;
    for (; j + KB <= j1; j += KB)
      scores<HD, NV, KB>(qt, kp + (j - j0), j, scale, nk, min_keys, fk, max_first, s);
    for (; j < j1; ++j)
      scores<HD, NV, 1>(qt, kp + (j - j0), j, scale, nk, min_keys, fk, max_first, s);
  }

  // Pass 2: softmax numerators in place and their sums, in key order per lane.
  // A lane's max starts at its sink and its sum at exp(sink - max): -inf and +0 without one.
  alignas(32) float lane_sink[L];
  for (int i = 0; i < L; ++i) lane_sink[i] = i < t.n ? t.sink[i] : -INFINITY;
  __m256 mx[NV], sum[NV];
  for (int v = 0; v < NV; ++v) mx[v] = _mm256_load_ps(lane_sink + 8 * v);
  for (int j = 0; j < n_keys; ++j)
    for (int v = 0; v < NV; ++v)
      mx[v] = _mm256_max_ps(mx[v], _mm256_loadu_ps(s + size_t(j) * L + 8 * v));
  for (int v = 0; v < NV; ++v)
    sum[v] = exp256(_mm256_sub_ps(_mm256_load_ps(lane_sink + 8 * v), mx[v]));
  for (int j = 0; j < n_keys; ++j)
    for (int v = 0; v < NV; ++v) {
      float* sj = s + size_t(j) * L + 8 * v;
      const __m256 p = exp256(_mm256_sub_ps(_mm256_loadu_ps(sj), mx[v]));
      _mm256_storeu_ps(sj, p);
      sum[v] = _mm256_add_ps(sum[v], p);
    }

  // Pass 3: output = sum_j p_j V[j], dimension chunks of DC with 8 accumulators.
  constexpr int DC = 8 / NV;
  const float* vp[kKeyBlock];
  for (int j0 = 0; j0 < n_keys; j0 += kKeyBlock) {
    const int j1 = std::min(n_keys, j0 + kKeyBlock);
    if (j1 < n_keys)
      prefetch_rows(rows.v, rows.head_offset, row_bytes, j1, std::min(n_keys, j1 + kKeyBlock));
    block_rows<HD>(rows.v, rows.head_offset, rows.dtype, j0, j1, conv, vp);
    for (int d0 = 0; d0 < HD; d0 += DC) {
      __m256 acc[DC][NV];
#pragma GCC unroll 8
      for (int c = 0; c < DC; ++c)
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v)
          acc[c][v] = j0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(ot + (d0 + c) * L + 8 * v);
      for (int j = j0; j < j1; ++j) {
        __m256 p[NV];
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) p[v] = _mm256_loadu_ps(s + size_t(j) * L + 8 * v);
        const float* vr = vp[j - j0] + d0;
#pragma GCC unroll 8
        for (int c = 0; c < DC; ++c) {
          const __m256 x = _mm256_broadcast_ss(vr + c);
#pragma GCC unroll 2
          for (int v = 0; v < NV; ++v) acc[c][v] = _mm256_fmadd_ps(p[v], x, acc[c][v]);
        }
      }
#pragma GCC unroll 8
      for (int c = 0; c < DC; ++c)
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) _mm256_storeu_ps(ot + (d0 + c) * L + 8 * v, acc[c][v]);
    }
  }

  alignas(32) float inv[L];
  for (int v = 0; v < NV; ++v)
    _mm256_store_ps(inv + 8 * v, _mm256_div_ps(_mm256_set1_ps(1.0f), sum[v]));
  for (int i = 0; i < t.n; ++i)
    for (int d = 0; d < HD; ++d) t.out[i][d] = ot[d * L + i] * inv[i];
}

template <int HD>
void attend_tile_hd(const AttentionTile& t, const KvRows& rows, float scale,
                    AttentionScratch& scratch) {
  if (t.n <= 8)
    attend_tile<HD, 1>(t, rows, scale, scratch);
  else
    attend_tile<HD, 2>(t, rows, scale, scratch);
}

}  // namespace

void widen_rows(const uint8_t* const* rows, size_t offset, int n, int elems, DType dtype,
                float* out) {
  if (dtype_blocked(dtype)) {
    for (int i = 0; i < n; ++i)
      widen_blocked(dtype, rows[i] + offset, elems, out + size_t(i) * size_t(elems));
    return;
  }
  for (int i = 0; i < n; ++i) {
    const auto* src = reinterpret_cast<const uint16_t*>(rows[i] + offset);
    float* dst = out + size_t(i) * size_t(elems);
    int d = 0;
    for (; d + 8 <= elems; d += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + d));
      _mm256_storeu_ps(dst + d, dtype == DType::F16 ? _mm256_cvtph_ps(h)
                                                    : _mm256_castsi256_ps(_mm256_slli_epi32(
                                                          _mm256_cvtepu16_epi32(h), 16)));
    }
    for (; d < elems; ++d) dst[d] = dtype == DType::F16 ? f16_to_f32(src[d]) : bf16_to_f32(src[d]);
  }
}

bool attend_tile_supported(int head_dim) {
  return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256;
}

bool attend_tile_avx2(const AttentionTile& tile, const KvRows& rows, int head_dim, float scale,
                      AttentionScratch& scratch) {
  switch (head_dim) {
    case 16:
      attend_tile_hd<16>(tile, rows, scale, scratch);
      return true;
    case 32:
      attend_tile_hd<32>(tile, rows, scale, scratch);
      return true;
    case 64:
      attend_tile_hd<64>(tile, rows, scale, scratch);
      return true;
    case 128:
      attend_tile_hd<128>(tile, rows, scale, scratch);
      return true;
    case 256:
      attend_tile_hd<256>(tile, rows, scale, scratch);
      return true;
    default:
      return false;
  }
}

}  // namespace fak::kernels
