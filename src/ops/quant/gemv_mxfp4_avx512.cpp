// AVX-512 VNNI decode kernel for MXFP4 rows in their stored layout (gpt-oss's experts, a MoE
// decode step's weight bytes): one activation row against 16 rows, lane i holding row i.
//
// The AVX2 kernel (gemv_avx2.cpp) multiplies each row's block on its own and then reduces 8 rows'
// partial sums into one register, per block: 33 GMAC/s on one core, so a gpt-oss decode step read
// its experts at 15-30 GB/s where the Q8_0 output head beside them streams at 40+. Here each row's
// 16 bytes of nibbles go into one 128-bit lane, four rows to a register, and a 4 x 4 dword
// transpose per lane leaves registers whose lane i holds four bytes of row i: their nibbles' codes
// go straight into vpdpbusd against the activation's four broadcast bytes, with nothing to reduce.
// vpdpbusd multiplies unsigned codes, so the codes are taken plus 12 (codes_mxfp4_unsigned's
// table) and 12 x the activation block's sum comes off.
//
// note: bit-identical to the AVX2 kernel and to vec_dot (dot_ref.cpp's block-serial rule): each
// row's integer block sum is exact whatever order makes it, and per block each lane does the same
// float steps, acc = fma(d_w * d_a, float(isum), acc). matmul_quant_test compares them.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/avx512_warnings.h"  // first: before the intrinsics headers
#include "ops/quant/panels_avx512.h"
#include "quant/quant_blocks.h"

namespace fak::kernels {

namespace {

using namespace fak::quant;

inline __m128i load128(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// Σ of an activation block's 32 quants.
inline int32_t block_sum(const BlockQ8_0& a) {
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(1), load256(a.qs));
  const __m256i s = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
  const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  const __m128i q = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
  return _mm_cvtsi128_si32(_mm_add_epi32(q, _mm_shuffle_epi32(q, 0xb1)));
}

// Block b of 16 rows against activation block a, from its code registers T[k] (lane i: dword k of
// row i's nibbles: codes 4k..4k+3 in the low nibbles, 16 + 4k.. in the high) and its 16 scales.
inline __m512 mxfp4_codes_block(const __m512i T[4], __m512 dw, const BlockQ8_0& a, int32_t a_sum,
                                __m512 acc) {
  const __m512i m0f = _mm512_set1_epi8(0x0F);
  __m512i lo_sum = _mm512_setzero_si512(), hi_sum = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m512i lo = mxfp4_unsigned_512(_mm512_and_si512(T[k], m0f));
    const __m512i hi = mxfp4_unsigned_512(_mm512_and_si512(_mm512_srli_epi16(T[k], 4), m0f));
    lo_sum = _mm512_dpbusd_epi32(lo_sum, lo, bcast4_512(a.qs + 4 * k));
    hi_sum = _mm512_dpbusd_epi32(hi_sum, hi, bcast4_512(a.qs + 16 + 4 * k));
  }
  const __m512i isum =
      _mm512_sub_epi32(_mm512_add_epi32(lo_sum, hi_sum), _mm512_set1_epi32(12 * a_sum));
  return _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(h2f(a.d))), _mm512_cvtepi32_ps(isum),
                         acc);
}

// Rows [r, r + 16), block b, against activation block a: acc after the block.
inline __m512 mxfp4_block(const uint8_t* group, size_t row_bytes, __m512i e_offsets, int64_t b,
                          const BlockQ8_0& a, int32_t a_sum, __m512 acc) {
  const size_t at = size_t(b) * sizeof(BlockMxfp4);
  const uint8_t* qs = group + at + offsetof(BlockMxfp4, qs);
  // R[j]: lane L holds row 4L + j's 16 bytes, so that after the transpose dword lane 4L + j is row
  // 4L + j.
  __m512i R[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    __m512i v = _mm512_castsi128_si512(load128(qs + size_t(j) * row_bytes));
    v = _mm512_inserti32x4(v, load128(qs + size_t(4 + j) * row_bytes), 1);
    v = _mm512_inserti32x4(v, load128(qs + size_t(8 + j) * row_bytes), 2);
    R[j] = _mm512_inserti32x4(v, load128(qs + size_t(12 + j) * row_bytes), 3);
  }
  const __m512i t0 = _mm512_unpacklo_epi32(R[0], R[1]), t1 = _mm512_unpackhi_epi32(R[0], R[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(R[2], R[3]), t3 = _mm512_unpackhi_epi32(R[2], R[3]);
  // T[k]: dword k (codes 4k..4k+3 in the low nibbles, 16+4k.. in the high) of every row.
  const __m512i T[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2),
                        _mm512_unpacklo_epi64(t1, t3), _mm512_unpackhi_epi64(t1, t3)};
  // The 16 rows' exponents as 2^(e - 128) (quant::e8m0_half; subnormal bit patterns for e < 2).
  const __m512i e = _mm512_and_si512(
      _mm512_i32gather_epi32(_mm512_add_epi32(e_offsets, _mm512_set1_epi32(int32_t(at))), group, 1),
      _mm512_set1_epi32(0xff));
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
  const __m512i subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
  const __m512 dw = _mm512_castsi512_ps(
      _mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(e, _mm512_set1_epi32(1)), subnormal, normal));
  return mxfp4_codes_block(T, dw, a, a_sum, acc);
}

// Each token's activation block sums, once per call.
const int32_t* activation_sums(const QuantTask& q, int64_t nb) {
  thread_local std::vector<int32_t> sums;
  sums.resize(size_t(nb) * size_t(q.n_tokens));
  for (int t = 0; t < q.n_tokens; ++t) {
    const auto* a = reinterpret_cast<const BlockQ8_0*>(q.act + size_t(t) * q.act_row_bytes);
    for (int64_t b = 0; b < nb; ++b) sums[size_t(t) * size_t(nb) + size_t(b)] = block_sum(a[b]);
  }
  return sums.data();
}

// Groups of 16 rows from r0 while a whole group fits before r_end, every token of q against each:
// block(group, b, activation block, its sum, acc) -> acc. The next group streams in while one is
// read (see NextRows). Returns where it stopped.
template <class Block>
int64_t each_group(const QuantTask& q, int64_t r0, int64_t r_end, Block block) {
  const int64_t nb = q.w->cols / quant::kQK;
  const int32_t* sums = activation_sums(q, nb);
  const size_t group_bytes = size_t(kRows) * q.w->row_bytes;
  int64_t r = r0;
  for (; r + kRows <= r_end; r += kRows) {
    const uint8_t* group = q.w->row(r);
    NextRows next;
    if (r + 2 * kRows <= q.w->rows) next = {group + group_bytes, group_bytes, 0};
    for (int t = 0; t < q.n_tokens; ++t) {
      const auto* a = reinterpret_cast<const BlockQ8_0*>(q.act + size_t(t) * q.act_row_bytes);
      const int32_t* a_sums = sums + size_t(t) * size_t(nb);
      __m512 acc = _mm512_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) {
        if (t == 0) next.upto(b, nb);
        acc = block(group, b, a[b], a_sums[b], acc);
      }
      _mm512_storeu_ps(q.y + size_t(t) * size_t(q.w->rows) + size_t(r), acc);
    }
  }
  return r;
}

void rows_gemv_mxfp4(const QuantTask& q, int64_t r0, int64_t r1) {
  const size_t row_bytes = q.w->row_bytes;
  const __m512i e_offsets =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(int32_t(row_bytes)));
  const int64_t r = each_group(
      q, r0, r1, [&](const uint8_t* group, int64_t b, const BlockQ8_0& a, int32_t sum, __m512 acc) {
        return mxfp4_block(group, row_bytes, e_offsets, b, a, sum, acc);
      });
  // The rows left over go through the AVX2 kernel (8-row panels, then vec_dot): the same bits.
  if (r < r1) quant_gemv_avx2(QuantType::MXFP4)(q, r, r1);
}

}  // namespace

// The same over weights packed at load (quant_blocks.h's kPackedMxfp4*): each block's code
// registers are four loads and its exponents one, the same values the rows' transpose and gather
// give, so the same bits. Rows [r0, r1) are whole groups.
inline namespace FAK_ISA_NS {
void gemv_packed_mxfp4(const QuantTask& q, int64_t r0, int64_t r1) {
  each_group(
      q, r0, r1, [](const uint8_t* panel, int64_t b, const BlockQ8_0& a, int32_t sum, __m512 acc) {
        const uint8_t* p = panel + size_t(b) * quant::kPackedMxfp4BlockBytes;
        const uint8_t* codes = p + quant::kPackedMxfp4CodesOffset;
        const __m512i T[4] = {_mm512_loadu_si512(codes), _mm512_loadu_si512(codes + 64),
                              _mm512_loadu_si512(codes + 128), _mm512_loadu_si512(codes + 192)};
        return mxfp4_codes_block(T, e8m0_half_x16(p), a, sum, acc);
      });
}
}  // namespace FAK_ISA_NS

QuantTileFn quant_gemv_avx512(QuantType t) {
  return t == QuantType::MXFP4 ? rows_gemv_mxfp4 : quant_gemv_lowbit_avx512(t);
}

}  // namespace fak::kernels
