// AVX-512 VNNI decode kernels for q4_K, q6_K, q2_K, q3_K and iq4_xs weights packed at load
// (quant_blocks.h's kPackedQ4K* / kPackedQ6K* / kPackedQ2K* / kPackedQ3K* / kPackedIq4Xs*): one
// activation row against 16 rows, lane i holding row i.
//
// A one-token tile of the prefill kernels (gemm_avx512.cpp) read these panels at 38 (q4_K) and
// 29 (q6_K) GB/s on one core, below what memory gives two cores (62 GB/s): a Q4_K_M model's
// Q6_K output head, half of a MoE decode step, ran compute-bound. Here, per block of 16 rows:
// - every code register is made once, with one ternary-logic merge of its nibble and its high
//   bits (q6_K: the two high bits of four slices come from one qh load),
// - the sub-blocks' dot products are 8 independent vpdpbusd chains, not one chain at a time,
// - sub-block scales and mins are taken from the packed dwords with shifts in registers, not
//   widened through the stack.
// One core, 4864 x 1024 (matmul_quant_bench *_decode_packed, interleaved with the tiles, a noisy
// host): q4_K 29-43 -> 36-45 GB/s, q6_K 17-29 -> 28-39 GB/s; Qwen3-30B-A3B 6 layers Q4_K_M, tg32 on
// two threads 90-97 -> 101-107 tok/s.
//
// The low-bit types (Q3_K_M / Q2_K / IQ4_XS files) read their stored rows with a kernel that
// multiplies each row on its own and reduces 16 rows' sums per block (gemv_lowbit_avx512.cpp);
// packed, their codes too go straight into vpdpbusd with the rows in lanes, and the sub-block
// scales come in by vpdpwssd on sums that fit an int16 (q2_K / q3_K) or one vpmulld (iq4_xs).
// 131072 x 1024 rows, two threads (matmul_quant_bench *_streamed_1tok*): q2_K 1.92 -> 1.04 ms,
// q3_K 2.54 -> 1.71 ms against the stored rows; the Qwen3-30B-A3B 6-layer Q3_K_M cut, tg32
// alternated with the previous commit (AVX2 decode of the stored rows): 42.3-44.3 -> 47.4-50.2
// tok/s, pp512 510 / 524 -> 571 / 551.
//
// note: bit-identical to the tiles and to vec_dot (dot_ref.cpp's block-serial rule): the integer
// block sum is exact whatever order makes it (q6_K: Σ_k sc_k (Σ q a - 32 bsum_k) is the reference's
// Σ_k sc_k Σ q a - 32 Σ_k sc_k bsum_k), and per block each lane does the same float steps,
// acc = fma(d_w * d_a, float(isum), acc) (q4_K / q2_K: then acc = fnma(dmin_w * d_a, float(imin),
// acc)).
// matmul_quant_test compares them.
#include <cstddef>
#include <cstdint>

#include "core/avx512_warnings.h"  // first: before the intrinsics headers
#include "ops/quant/packed_lowbit_avx512.h"
#include "ops/quant/panels_avx512.h"
#include "quant/quant_blocks.h"

namespace fak::kernels {
inline namespace FAK_ISA_NS {

namespace {

using quant::BlockQ8K;

inline __m512i load_u(const uint8_t* p) {
  return _mm512_loadu_si512(p);
}
inline __m512 load_f16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// (a & c) | (b & ~c): the bytes' bits from a where c is set, from b elsewhere.
inline __m512i bit_select(__m512i a, __m512i b, __m512i c) {
  return _mm512_ternarylogic_epi32(a, b, c, 0xE4);
}

// One block of 16 q6_K rows against activation block a, into acc.
// Element 128h + 32gg + 4G + (0..3) of a row: the low (gg < 2) or high nibble of ql dword
// 16h + 8 (gg & 1) + G, bits 2gg of qh dword 8h + G; sub-block k = 8h + 2gg + (G >= 4).
[[gnu::always_inline]] inline __m512 q6_k_block(const uint8_t* p, const BlockQ8K& a, __m512 acc) {
  const __m512i m0f = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  alignas(64) int32_t off[16];  // 32 bsum_k: the -32 code offset, taken off each sub-block
  _mm512_store_si512(off, _mm512_slli_epi32(_mm512_cvtepi16_epi32(quant::load256(a.bsums)), 5));
  const uint8_t* low = p + quant::kPackedQ6KLowOffset;
  const uint8_t* high = p + quant::kPackedQ6KHighOffset;
  __m512i isum = _mm512_setzero_si512();
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    __m512i t[8];  // sub-block 8h + k: t[k], k = 2gg + s
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) t[k] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int G = 0; G < 8; ++G) {
      const int s = G >> 2;
      const __m512i qh = load_u(high + 64 * (8 * h + G));
      const __m512i qa = load_u(low + 64 * (16 * h + G));
      const __m512i qb = load_u(low + 64 * (16 * h + 8 + G));
      const __m512i c0 = bit_select(qa, _mm512_and_si512(_mm512_slli_epi16(qh, 4), m30), m0f);
      const __m512i c1 = bit_select(qb, _mm512_and_si512(_mm512_slli_epi16(qh, 2), m30), m0f);
      const __m512i c2 = bit_select(_mm512_srli_epi16(qa, 4), _mm512_and_si512(qh, m30), m0f);
      const __m512i c3 = bit_select(_mm512_srli_epi16(qb, 4),
                                    _mm512_and_si512(_mm512_srli_epi16(qh, 2), m30), m0f);
      const int8_t* aq = a.qs + 128 * h + 4 * G;
      t[s] = _mm512_dpbusd_epi32(t[s], c0, bcast4_512(aq));
      t[2 + s] = _mm512_dpbusd_epi32(t[2 + s], c1, bcast4_512(aq + 32));
      t[4 + s] = _mm512_dpbusd_epi32(t[4 + s], c2, bcast4_512(aq + 64));
      t[6 + s] = _mm512_dpbusd_epi32(t[6 + s], c3, bcast4_512(aq + 96));
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const int sub = 8 * h + k;  // the scale: byte sub % 4 of scales dword sub / 4, signed
      const __m512i v = load_u(p + quant::kPackedQ6KScalesOffset + 64 * (sub / 4));
      const __m512i sc = _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * (sub % 4)), 24);
      const __m512i q = _mm512_sub_epi32(t[k], _mm512_set1_epi32(off[sub]));
      isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(q, sc));
    }
  }
  const __m512 dw = load_f16x16(p);
  return _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(a.d)), _mm512_cvtepi32_ps(isum), acc);
}

// One block of 16 q4_K rows against activation block a, into acc.
// Codes dword 8c + G: its low nibbles are elements 64c + 4G + (0..3) (sub-block 2c), its high
// ones 64c + 32 + 4G + (0..3) (sub-block 2c + 1). Scales and mins: scales_mins_k4's word steps on
// the packed dwords, then each sub-block's byte shifted down in its lane.
[[gnu::always_inline]] inline __m512 q4_k_block(const uint8_t* p, const BlockQ8K& a, __m512 acc) {
  const __m512i m0f = _mm512_set1_epi8(0x0F);
  const K4ScaleBytes sm = k4_scale_bytes(p);
  const uint8_t* codes = p + quant::kPackedQ4KCodesOffset;
  __m512i t[8];  // sub-block s
#pragma GCC unroll 8
  for (int s = 0; s < 8; ++s) t[s] = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c)
#pragma GCC unroll 8
    for (int G = 0; G < 8; ++G) {
      const __m512i raw = load_u(codes + 64 * (8 * c + G));
      const int8_t* aq = a.qs + 64 * c + 4 * G;
      t[2 * c] = _mm512_dpbusd_epi32(t[2 * c], _mm512_and_si512(raw, m0f), bcast4_512(aq));
      t[2 * c + 1] = _mm512_dpbusd_epi32(
          t[2 * c + 1], _mm512_and_si512(_mm512_srli_epi16(raw, 4), m0f), bcast4_512(aq + 32));
    }
  __m512i isum = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int s = 0; s < 8; ++s) {
    const __m512i bytes = s < 4 ? sm.sc_lo : sm.sc_hi;
    const __m512i sc =
        _mm512_and_si512(_mm512_srli_epi32(bytes, 8 * (s % 4)), _mm512_set1_epi32(0xff));
    isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(t[s], sc));
  }
  // Σ_s m_s sums32_s: the mins against the 32-element sums, two per VPDPWSSD.
  __m512i imin = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m512i mp = byte_pair_i16(k < 2 ? sm.m_lo : sm.m_hi, k % 2);  // m_2k, m_2k+1
    imin = dpwssd_bcast4(imin, mp, &a.sums32[2 * k]);
  }
  const __m512 da = _mm512_set1_ps(a.d);
  acc = _mm512_fmadd_ps(_mm512_mul_ps(load_f16x16(p), da), _mm512_cvtepi32_ps(isum), acc);
  return _mm512_fnmadd_ps(_mm512_mul_ps(load_f16x16(p + 32), da), _mm512_cvtepi32_ps(imin), acc);
}

// Two activation bsums as the int16 pair (lo, hi) in all 16 lanes.
inline __m512i bsum_pair(const BlockQ8K& a, int lo, int hi) {
  return _mm512_set1_epi32(
      int32_t(uint32_t(uint16_t(a.bsums[lo])) | (uint32_t(uint16_t(a.bsums[hi])) << 16)));
}

// q2_K / q3_K codes: qs dword 8n + G of a row holds elements 128n + 32j + 4G + (0..3) at bits 2j
// (sub-block 8n + 2j + G / 4). A sub-block's sum t_k (16 codes <= 7 times activations, |t_k| <=
// 14224 with q3_K's offset) fits an int16, so vpdpwssd applies its scale: the int32 t_k's low word
// times the scale, its high word (t_k's sign) times 0.

// The order the 8 qs dwords of a half are taken in: G and G + 4 feed different sub-blocks, so
// alternating them keeps 8 vpdpbusd chains going, not 4 (a chain waits on its last product).
constexpr int kChainOrder[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// One block of 16 q2_K rows against activation block a, into acc.
[[gnu::always_inline]] inline __m512 q2_k_block(const uint8_t* p, const BlockQ8K& a, __m512 acc) {
  const __m512i low4 = _mm512_set1_epi32(0x0f0f0f0f);
  const uint8_t* codes = p + quant::kPackedQ2KCodesOffset;
  __m512i isum = _mm512_setzero_si512(), imin = _mm512_setzero_si512();
#pragma GCC unroll 2
  for (int n = 0; n < 2; ++n) {
    __m512i t[8];  // sub-block 8n + k
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) t[k] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      const int G = kChainOrder[g];
      const __m512i q = load_u(codes + 64 * (8 * n + G));
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        t[2 * j + G / 4] = _mm512_dpbusd_epi32(t[2 * j + G / 4], low2_codes_512(q, j),
                                               bcast4_512(a.qs + 128 * n + 32 * j + 4 * G));
      }
    }
#pragma GCC unroll 2
    for (int d = 2 * n; d < 2 * n + 2; ++d) {  // scales dword d: sub-blocks 4d..4d+3
      const __m512i raw = load_u(p + quant::kPackedQ2KScalesOffset + 64 * d);
      const __m512i sc = _mm512_and_si512(raw, low4);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c)
        isum = _mm512_dpwssd_epi32(isum, t[4 * d + c - 8 * n], dword_byte(sc, c));
      // The mins as int16 pairs: (m_4d, m_4d+2) and (m_4d+1, m_4d+3).
      const __m512i m = _mm512_and_si512(_mm512_srli_epi32(raw, 4), low4);
      imin = _mm512_dpwssd_epi32(imin, _mm512_and_si512(m, _mm512_set1_epi32(0x00ff00ff)),
                                 bsum_pair(a, 4 * d, 4 * d + 2));
      imin = _mm512_dpwssd_epi32(imin, _mm512_srli_epi16(m, 8), bsum_pair(a, 4 * d + 1, 4 * d + 3));
    }
  }
  const __m512 da = _mm512_set1_ps(a.d);
  acc = _mm512_fmadd_ps(_mm512_mul_ps(load_f16x16(p), da), _mm512_cvtepi32_ps(isum), acc);
  return _mm512_fnmadd_ps(_mm512_mul_ps(load_f16x16(p + 32), da), _mm512_cvtepi32_ps(imin), acc);
}

// One block of 16 q3_K rows against activation block a, into acc. Codes u = q + 4 (the 2 low bits,
// 4 where bit 4n + j of hmask byte 4G + (0..3) is set); each t_k starts at -4 bsum_k, so it ends
// as Σ q a, and the scales sc_k - 32 come in as sc_k, with 32 Σ_k t_k taken off after.
[[gnu::always_inline]] inline __m512 q3_k_block(const uint8_t* p, const BlockQ8K& a, __m512 acc) {
  const uint8_t* codes = p + quant::kPackedQ3KCodesOffset;
  const uint8_t* high = p + quant::kPackedQ3KHighOffset;
  const Q3KScales sc = q3_k_scales_512(p);
  __m512i isum = _mm512_setzero_si512(), tsum = _mm512_setzero_si512();
#pragma GCC unroll 2
  for (int n = 0; n < 2; ++n) {
    __m512i t[8];  // sub-block 8n + k
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) t[k] = _mm512_set1_epi32(-4 * a.bsums[8 * n + k]);
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      const int G = kChainOrder[g];
      const __m512i q = load_u(codes + 64 * (8 * n + G));
      const __m512i h = load_u(high + 64 * G);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j)
        t[2 * j + G / 4] = _mm512_dpbusd_epi32(t[2 * j + G / 4], q3_k_codes_512(q, h, n, j),
                                               bcast4_512(a.qs + 128 * n + 32 * j + 4 * G));
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const int sub = 8 * n + k;
      isum = _mm512_dpwssd_epi32(isum, t[k], dword_byte(sc.bytes[sub / 4], sub % 4));
      tsum = _mm512_add_epi32(tsum, t[k]);
    }
  }
  isum = _mm512_sub_epi32(isum, _mm512_slli_epi32(tsum, 5));
  const __m512 dw = load_f16x16(p);
  return _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(a.d)), _mm512_cvtepi32_ps(isum), acc);
}

// One block of 16 iq4_xs rows against activation block a, into acc. qs dword 4s + G holds
// elements 32s + 4G + (0..3) in its low nibbles and 32s + 16 + 4G + (0..3) in its high ones; the
// grid values go in + 128 (unsigned for vpdpbusd) and each sub-block's sum starts at -128 x its
// activations' sum.
[[gnu::always_inline]] inline __m512 iq4_xs_block(const uint8_t* p, const BlockQ8K& a, __m512 acc) {
  const __m512i m0f = _mm512_set1_epi8(0x0F);
  const __m512i grid = iq4_grid_unsigned_512();
  const uint8_t* codes = p + quant::kPackedIq4XsCodesOffset;
  const __m512i low = load_u(p + quant::kPackedIq4XsLowOffset);
  const __m512i high = iq4_xs_scales_high_512(p);
  __m512i isum = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int s = 0; s < 8; ++s) {
    // Two chains of vpdpbusd, the low nibbles' and the high ones'.
    __m512i t = _mm512_set1_epi32(-128 * a.sums32[s]);
    __m512i t_hi = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int G = 0; G < 4; ++G) {
      const __m512i raw = load_u(codes + 64 * (4 * s + G));
      const __m512i lo = _mm512_shuffle_epi8(grid, _mm512_and_si512(raw, m0f));
      const __m512i hi =
          _mm512_shuffle_epi8(grid, _mm512_and_si512(_mm512_srli_epi16(raw, 4), m0f));
      t = _mm512_dpbusd_epi32(t, lo, bcast4_512(a.qs + 32 * s + 4 * G));
      t_hi = _mm512_dpbusd_epi32(t_hi, hi, bcast4_512(a.qs + 32 * s + 16 + 4 * G));
    }
    t = _mm512_add_epi32(t, t_hi);
    isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(t, iq4_xs_scale_512(low, high, s)));
  }
  const __m512 dw = load_f16x16(p);
  return _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(a.d)), _mm512_cvtepi32_ps(isum), acc);
}

template <size_t kBlockBytes, __m512 (*kBlock)(const uint8_t*, const BlockQ8K&, __m512)>
void gemv_packed(const QuantTask& q, int64_t r0, int64_t r1) {
  const int64_t nb = q.w->cols / quant::kQKK;
  for (int64_t r = r0; r < r1; r += kRows) {
    const uint8_t* panel = q.w->row(r);
    for (int t = 0; t < q.n_tokens; ++t) {
      const auto* a = reinterpret_cast<const BlockQ8K*>(q.act + size_t(t) * q.act_row_bytes);
      __m512 acc = _mm512_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* p = panel + size_t(b) * kBlockBytes;
        if (t == 0) prefetch_block<kBlockBytes>(p);
        acc = kBlock(p, a[b], acc);
      }
      _mm512_storeu_ps(q.y + size_t(t) * size_t(q.w->rows) + size_t(r), acc);
    }
  }
}

}  // namespace

void gemv_packed_q4_k(const QuantTask& q, int64_t r0, int64_t r1) {
  gemv_packed<quant::kPackedQ4KBlockBytes, q4_k_block>(q, r0, r1);
}

void gemv_packed_q6_k(const QuantTask& q, int64_t r0, int64_t r1) {
  gemv_packed<quant::kPackedQ6KBlockBytes, q6_k_block>(q, r0, r1);
}

void gemv_packed_q2_k(const QuantTask& q, int64_t r0, int64_t r1) {
  gemv_packed<quant::kPackedQ2KBlockBytes, q2_k_block>(q, r0, r1);
}

void gemv_packed_q3_k(const QuantTask& q, int64_t r0, int64_t r1) {
  gemv_packed<quant::kPackedQ3KBlockBytes, q3_k_block>(q, r0, r1);
}

void gemv_packed_iq4_xs(const QuantTask& q, int64_t r0, int64_t r1) {
  gemv_packed<quant::kPackedIq4XsBlockBytes, iq4_xs_block>(q, r0, r1);
}

}  // namespace FAK_ISA_NS
}  // namespace fak::kernels
