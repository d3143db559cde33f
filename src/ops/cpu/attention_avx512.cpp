// AVX-512 attention: the AVX2 tile's three passes (attention_avx2.cpp) with 16 query lanes in one
// register, split in two halves of 8 that may belong to two sequences: a tile of 9..16 queries
// (prefill) as one sequence in both halves, or the one-token tiles of two sequences (batched
// decode) side by side. Either way each K and V element costs one fma for 16 lanes instead of two.
//
// note: every lane does exactly the AVX2 lane's operations in the same order (the score is one fma
// chain over the head dimension, the same exp polynomial, the softmax sum and the output in key
// order, one division), so the outputs are the same bits as attend_tile_avx2 (tested). A lone
// tile of up to 8 queries goes to the AVX2 kernel: the other half would be idle.
// note: GCC 12's AVX-512 intrinsics trip -Wmaybe-uninitialized inside the headers (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cmath>

#include "ops/attention_kernels.h"
#include "ops/cpu/attention_rows.h"
#include "ops/scratch.h"

namespace fak::kernels {

namespace {

constexpr int kKeyBlock = 64;
constexpr int L = 16;  // query lanes

// exp256 of attention_avx2.cpp, lane for lane.
inline __m512 exp512(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.33f);
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(88.37f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i e =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(__mmask16(~underflow), p, _mm512_castsi512_ps(e));
}

// Two tiles of up to 8 queries in one pass: lanes 0..7 are tile a's queries, lanes 8..15 tile b's,
// and each key step broadcasts a's K (or V) element to the low half and b's to the high half, or
// one element to both where the two share the key's row (one sequence, or a prefix both were
// cloned from). Each lane still sees only its own sequence's keys, in order, through the same fma
// chains as the AVX2 tile; a lane's keys past its own count (causal, or the other sequence is
// longer) are masked to -inf, so they add exact zeros (p = 0) to its sum and output.
template <int HD, int KB, bool kShared>
inline void scores_pair(const float* qt, const float* const* ka, const float* const* kb, int j,
                        float scale, __m512i n_keys, int min_keys, float* s) {
  __m512 acc[KB];
#pragma GCC unroll 8
  for (int b = 0; b < KB; ++b) acc[b] = _mm512_setzero_ps();
#pragma GCC unroll 4
  for (int d = 0; d < HD; ++d) {
    const __m512 q = _mm512_loadu_ps(qt + d * L);
#pragma GCC unroll 8
    for (int b = 0; b < KB; ++b) {
      __m512 k = _mm512_set1_ps(ka[b][d]);
      if constexpr (!kShared) k = _mm512_mask_broadcastss_ps(k, 0xFF00, _mm_set_ss(kb[b][d]));
      acc[b] = _mm512_fmadd_ps(q, k, acc[b]);
    }
  }
  const __m512 sc = _mm512_set1_ps(scale), neg_inf = _mm512_set1_ps(-INFINITY);
#pragma GCC unroll 8
  for (int b = 0; b < KB; ++b) {
    __m512 x = _mm512_mul_ps(acc[b], sc);
    if (j + b >= min_keys) {
      const __mmask16 valid = _mm512_cmpgt_epi32_mask(n_keys, _mm512_set1_epi32(j + b));
      x = _mm512_mask_blend_ps(valid, neg_inf, x);
    }
    _mm512_storeu_ps(s + size_t(j + b) * L, x);
  }
}

template <int HD>
void attend_pair(const AttentionTile& ta, const KvRows& ra, const AttentionTile& tb,
                 const KvRows& rb, float scale) {
  // na, nb: keys each sequence has rows for; min_keys: below it no lane is masked.
  int na = 0, nb = 0, min_keys = 1 << 30;
  for (int i = 0; i < ta.n; ++i) {
    na = ta.n_keys[i] > na ? ta.n_keys[i] : na;
    min_keys = ta.n_keys[i] < min_keys ? ta.n_keys[i] : min_keys;
  }
  for (int i = 0; i < tb.n; ++i) {
    nb = tb.n_keys[i] > nb ? tb.n_keys[i] : nb;
    min_keys = tb.n_keys[i] < min_keys ? tb.n_keys[i] : min_keys;
  }
  const int n_keys = na > nb ? na : nb, both = na < nb ? na : nb;
  // One sequence in both halves: its rows are read (and widened) once and always shared.
  const bool one_seq = ra.k == rb.k && ra.v == rb.v && ra.head_offset == rb.head_offset;
  const int rows_a = one_seq ? n_keys : na;  // rows read for the low half (both, if one sequence)
  const bool half = ra.dtype != DType::F32;
  const size_t need =
      size_t(2 * HD * L) + size_t(n_keys) * L + (half ? size_t(2 * kKeyBlock) * HD : 0);
  auto* buf = static_cast<float*>(thread_scratch(ScratchSlot::kAttention, sizeof(float) * need));
  float* qt = buf;
  float* ot = qt + HD * L;
  float* s = ot + HD * L;
  float* conv_a = s + size_t(n_keys) * L;
  float* conv_b = conv_a + size_t(kKeyBlock) * HD;

  alignas(64) int32_t lane_keys[L];
  for (int i = 0; i < 8; ++i) {
    lane_keys[i] = i < ta.n ? ta.n_keys[i] : na;
    lane_keys[8 + i] = i < tb.n ? tb.n_keys[i] : nb;
  }
  const __m512i nk = _mm512_load_si512(lane_keys);
  for (int d = 0; d < HD; ++d)
    for (int i = 0; i < 8; ++i) {
      qt[d * L + i] = i < ta.n ? ta.q[i][d] : 0.0f;
      qt[d * L + 8 + i] = i < tb.n ? tb.q[i][d] : 0.0f;
    }

  // Row pointers of keys [j0, j1) for one sequence; keys past its own count repeat its last row
  // (masked out, so any finite row will do).
  auto rows_of = [](const uint8_t* const* plane, const KvRows& r, int n, int j0, int j1,
                    float* conv, const float** out) {
    const int e = j1 < n ? j1 : n;
    if (j0 < e) block_rows<HD>(plane, r.head_offset, r.dtype, j0, e, conv, out);
    // f32: the sequence's last row; half types: a row widened earlier (this block's or the
    // previous one's), real finite values either way.
    const float* stand_in =
        r.dtype == DType::F32 ? reinterpret_cast<const float*>(plane[n - 1] + r.head_offset) : conv;
    for (int j = e > j0 ? e : j0; j < j1; ++j) out[j - j0] = stand_in;
  };
  // Two sequences share a key when its row is the same memory (a cloned prefix's blocks).
  auto same_rows = [](const uint8_t* const* pa, const uint8_t* const* pb, size_t off_a,
                      size_t off_b, int j, int n) {
    for (int b = 0; b < n; ++b)
      if (pa[j + b] + off_a != pb[j + b] + off_b) return false;
    return true;
  };

  // Pass 1: scores.
  constexpr int KB = 8;
  const float* kpa[kKeyBlock];
  const float* kpb[kKeyBlock];
  for (int j0 = 0; j0 < n_keys; j0 += kKeyBlock) {
    const int j1 = j0 + kKeyBlock < n_keys ? j0 + kKeyBlock : n_keys;
    rows_of(ra.k, ra, rows_a, j0, j1, conv_a, kpa);
    if (!one_seq) rows_of(rb.k, rb, nb, j0, j1, conv_b, kpb);
    const float* const* kb = one_seq ? kpa : kpb;
    int j = j0;
    for (; j + KB <= j1; j += KB) {
      const bool shared = one_seq || (j + KB <= both &&
                                      same_rows(ra.k, rb.k, ra.head_offset, rb.head_offset, j, KB));
      if (shared)
        scores_pair<HD, KB, true>(qt, kpa + (j - j0), kb + (j - j0), j, scale, nk, min_keys, s);
      else
        scores_pair<HD, KB, false>(qt, kpa + (j - j0), kb + (j - j0), j, scale, nk, min_keys, s);
    }
    for (; j < j1; ++j)
      scores_pair<HD, 1, false>(qt, kpa + (j - j0), kb + (j - j0), j, scale, nk, min_keys, s);
  }

  // Pass 2: softmax numerators and sums, in key order per lane.
  __m512 mx = _mm512_set1_ps(-INFINITY), sum = _mm512_setzero_ps();
  for (int j = 0; j < n_keys; ++j) mx = _mm512_max_ps(mx, _mm512_loadu_ps(s + size_t(j) * L));
  for (int j = 0; j < n_keys; ++j) {
    float* sj = s + size_t(j) * L;
    const __m512 p = exp512(_mm512_sub_ps(_mm512_loadu_ps(sj), mx));
    _mm512_storeu_ps(sj, p);
    sum = _mm512_add_ps(sum, p);
  }

  // Pass 3: output = sum_j p_j V[j].
  constexpr int DC = HD < 8 ? HD : 8;
  const float* vpa[kKeyBlock];
  const float* vpb[kKeyBlock];
  for (int j0 = 0; j0 < n_keys; j0 += kKeyBlock) {
    const int j1 = j0 + kKeyBlock < n_keys ? j0 + kKeyBlock : n_keys;
    rows_of(ra.v, ra, rows_a, j0, j1, conv_a, vpa);
    if (!one_seq) rows_of(rb.v, rb, nb, j0, j1, conv_b, vpb);
    const float* const* vb_rows = one_seq ? vpa : vpb;
    const bool shared = one_seq || (j1 <= both && same_rows(ra.v, rb.v, ra.head_offset,
                                                            rb.head_offset, j0, j1 - j0));
    for (int d0 = 0; d0 < HD; d0 += DC) {
      __m512 acc[DC];
#pragma GCC unroll 8
      for (int c = 0; c < DC; ++c)
        acc[c] = j0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(ot + (d0 + c) * L);
      for (int j = j0; j < j1; ++j) {
        const __m512 p = _mm512_loadu_ps(s + size_t(j) * L);
        const float* va = vpa[j - j0] + d0;
        const float* vb = vb_rows[j - j0] + d0;
        if (shared) {
#pragma GCC unroll 8
          for (int c = 0; c < DC; ++c) acc[c] = _mm512_fmadd_ps(p, _mm512_set1_ps(va[c]), acc[c]);
        } else {
#pragma GCC unroll 8
          for (int c = 0; c < DC; ++c)
            acc[c] = _mm512_fmadd_ps(
                p, _mm512_mask_broadcastss_ps(_mm512_set1_ps(va[c]), 0xFF00, _mm_set_ss(vb[c])),
                acc[c]);
        }
      }
#pragma GCC unroll 8
      for (int c = 0; c < DC; ++c) _mm512_storeu_ps(ot + (d0 + c) * L, acc[c]);
    }
  }

  alignas(64) float inv[L];
  _mm512_store_ps(inv, _mm512_div_ps(_mm512_set1_ps(1.0f), sum));
  for (int i = 0; i < ta.n; ++i)
    for (int d = 0; d < HD; ++d) ta.out[i][d] = ot[d * L + i] * inv[i];
  for (int i = 0; i < tb.n; ++i)
    for (int d = 0; d < HD; ++d) tb.out[i][d] = ot[d * L + 8 + i] * inv[8 + i];
}

}  // namespace

bool attend_tile_avx512(const AttentionTile& tile, const KvRows& rows, int head_dim, float scale,
                        AttentionScratch& scratch) {
  if (tile.n <= 8) return attend_tile_avx2(tile, rows, head_dim, scale, scratch);
  // Queries 0..7 in the low half, the rest in the high half, one sequence's rows for both.
  AttentionTile lo = tile, hi;
  lo.n = 8;
  hi.n = tile.n - 8;
  for (int i = 0; i < hi.n; ++i) {
    hi.q[i] = tile.q[8 + i];
    hi.out[i] = tile.out[8 + i];
    hi.n_keys[i] = tile.n_keys[8 + i];
  }
  return attend_pair_avx512(lo, rows, hi, rows, head_dim, scale);
}

bool attend_pair_avx512(const AttentionTile& a, const KvRows& ra, const AttentionTile& b,
                        const KvRows& rb, int head_dim, float scale) {
  if (a.n > 8 || b.n > 8 || ra.dtype != rb.dtype) return false;
  switch (head_dim) {
    case 16:
      attend_pair<16>(a, ra, b, rb, scale);
      return true;
    case 32:
      attend_pair<32>(a, ra, b, rb, scale);
      return true;
    case 64:
      attend_pair<64>(a, ra, b, rb, scale);
      return true;
    case 128:
      attend_pair<128>(a, ra, b, rb, scale);
      return true;
    case 256:
      attend_pair<256>(a, ra, b, rb, scale);
      return true;
    default:
      return false;
  }
}

}  // namespace fak::kernels
