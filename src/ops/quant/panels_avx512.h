// What the AVX-512 VNNI panels are made of, shared by the tiles that repack rows per call
// (gemm_avx512.cpp) and the packing done once at load (pack_avx512.cpp): the 16-row transpose and
// q8_0's unsigned codes. Only for files compiled with AVX-512.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "core/isa_namespace.h"
#include "ops/matmul_kernels.h"
#include "ops/quant/gemm_avx2.h"
#include "quant/avx2_common.h"
#include "quant/quant_blocks.h"

namespace fak::kernels {
inline namespace FAK_ISA_NS {

// Rows in a panel: one per lane of a register of 16 dwords.
inline constexpr int kRows = 16;

// 16 rows' 8 dwords each (lo: rows 0..7, hi: rows 8..15) -> 8 registers, register g holding dword g
// of row i in lane i. The 8x8 transpose of gemm_avx2.h done on both halves at once (the unpacks
// work per 128-bit lane; the last step's 128-bit swaps become two-source qword permutes), in
// registers: through the AVX2 one, the compiler spilled the 16 halves to the stack, and the
// repack was most of a few-token call.
[[gnu::always_inline]] inline void store_transposed16(const __m256i lo[8], const __m256i hi[8],
                                                      uint8_t* out) {
  __m512i v[8], t[8], u[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) v[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo[i]), hi[i], 1);
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // Per 256-bit half: [a.lo128, b.lo128] and [a.hi128, b.hi128] (permute2x128 0x20 / 0x31).
  const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
  const __m512i second = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    _mm512_storeu_si512(reinterpret_cast<__m512i*>(out + 64 * g),
                        _mm512_permutex2var_epi64(u[g], first, u[g + 4]));
    _mm512_storeu_si512(reinterpret_cast<__m512i*>(out + 64 * (g + 4)),
                        _mm512_permutex2var_epi64(u[g], second, u[g + 4]));
  }
}

// How far ahead of the block being read the decode loops prefetch (q4_K / q6_K:
// gemv_packed_avx512.cpp; the packed tiles of a few tokens: gemm_avx512.cpp). It fetched the next
// 16-row group, which is as far as a group is long: 18 KB on 2048 columns, 48 KB on Gemma 3 27B's
// 5376, 193 KB on its 21504-column down projection, past L1 (48 KB) before it was read. Two
// threads, alternated runs, tg tok/s: the Gemma-3-27B 6-layer Q4_K_M cut 17.7 / 16.1 (next
// group), 20.1 / 19.5 (1 KB ahead), 21.9 / 22.1 (2 KB), 24.2 / 25.3 (4 KB), 24.5 / 23.2 (6 KB),
// and 26.6 / 25.5 against 19.7 / 17.3 in another pair of rounds; the Qwen3-30B-A3B 6-layer Q4_K_M
// cut 83.2 / 83.8 (next group), 99.4 / 95.2 (4 KB), 98.0 / 87.5 (6 KB).
constexpr size_t kPrefetchAhead = 4096;

// The next 16-row group, prefetched evenly over the blocks of this group's repacking: with few
// tokens per call (batched decode, continuous batching's mixed steps) the rows are read once from
// memory as 16 interleaved streams, which the hardware prefetchers follow badly. Started at this
// group + kPrefetchAhead instead, it prefetches that far ahead of the block being read, running on
// into the next group (groups follow one another in memory) and, at the matrix's end, past it: a
// prefetch does not fault.
// kToL2: into L2 only (kPrefetchFar's stream, FarRows), not L1. A template parameter, not a
// member: a run-time choice of hint in this loop cost the MXFP4 decode kernel, which inlines it,
// 13% (gpt-oss-20b tg32 10.2 -> 9.0 tok/s).
// far: a second stream as far ahead of p as it is set, into L2 (kPrefetchFar's, as the decode
// kernels' prefetch_block has beside its L1 one).
template <bool kToL2 = false>
struct PrefetchRows {
  const uint8_t* p = nullptr;  // null: nothing to prefetch
  size_t bytes = 0, done = 0;
  const uint8_t* far = nullptr;
  void upto(int64_t b, int64_t nb) {
    if (!p) return;
    for (const size_t end = size_t(b + 1) * bytes / size_t(nb); done < end; done += 64) {
      if constexpr (kToL2)
        _mm_prefetch(reinterpret_cast<const char*>(p + done), _MM_HINT_T1);
      else
        _mm_prefetch(reinterpret_cast<const char*>(p + done), _MM_HINT_T0);
      if (far) _mm_prefetch(reinterpret_cast<const char*>(far + done), _MM_HINT_T1);
    }
  }
};
using NextRows = PrefetchRows<false>;
using FarRows = PrefetchRows<true>;

// The decode kernels' second prefetch stream: this far ahead of the block being read, into L2,
// beside kPrefetchAhead's into L1. The L2 streamer alone kept too few lines in flight to keep
// memory busy while the q4_K / q6_K kernels compute (a quarter of their time per byte). Two
// threads, tg32 tok/s, alternated runs of the Qwen3-30B-A3B 6-layer Q4_K_M cut (probe 29-31 GB/s):
// L1 stream only 46.7 / 44.0 (66-72% of the probe), + this at 16 KB 54.2 / 54.2 / 57.1 / 55.3
// (82-87%), at 8 KB 56.6 / 55.7, 32 KB 56.2 / 56.5, 64 KB 55.6 / 54.2; the L2 stream without the
// L1 one 48.1 / 47.9.
constexpr size_t kPrefetchFar = 16384;

// The lines kPrefetchAhead past a packed block into L1 (kToL1) and kPrefetchFar past it into L2:
// a packed group is one stream, its blocks one after another, so what a block reads is prefetched
// that far ahead of it, the next group's at the end of a group. Unrolled, the offsets constants:
// through PrefetchRows' loop, whose counters GCC kept on the stack around a block kernel it did not
// inline, prefetching took a third of an L1-resident q6_K call (505 -> 390 cycles a 16-row block
// without it), and q8_0's divided once a block.
template <size_t kBlockBytes, bool kToL1 = true>
[[gnu::always_inline]] inline void prefetch_block(const uint8_t* p) {
#pragma GCC unroll 64
  for (size_t o = 0; o < kBlockBytes; o += 64) {
    if constexpr (kToL1)
      _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchAhead + o), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchFar + o), _MM_HINT_T1);
  }
}

// 4 activation bytes broadcast to all 16 lanes.
// 16 E8M0 exponent bytes (one per row) as 16 floats 2^(e - 128) (quant::e8m0_half): subnormal bit
// patterns for e < 2.
inline __m512 e8m0_half_x16(const uint8_t* p) {
  const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
  const __m512i subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
  return _mm512_castsi512_ps(
      _mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(e, _mm512_set1_epi32(1)), subnormal, normal));
}

// The fp16 at rows[i] + offset for the 16 rows, as 16 floats stored at out.
inline void store_scales16(const uint8_t* const* rows, size_t offset, uint8_t* out) {
  _mm256_store_ps(reinterpret_cast<float*>(out), gather_f16x8(rows, offset));
  _mm256_store_ps(reinterpret_cast<float*>(out + 32), gather_f16x8(rows + 8, offset));
}

inline __m512 load_ps(const uint8_t* p) {
  return _mm512_load_ps(reinterpret_cast<const float*>(p));
}
inline __m512i load_si(const uint8_t* p) {
  return _mm512_load_si512(reinterpret_cast<const __m512i*>(p));
}
inline void store_si(uint8_t* p, __m512i v) {
  _mm512_store_si512(reinterpret_cast<__m512i*>(p), v);
}
// 16 fp16 values at src stored widened as 16 floats at dst (64-byte aligned): a packed block's
// scales into a call's own panel.
inline void store_f16x16(const uint8_t* src, uint8_t* dst) {
  _mm512_store_ps(reinterpret_cast<float*>(dst),
                  _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src))));
}

// MXFP4 nibbles (0..15, one per byte) -> their doubled E2M1 values + 12 (0..24, unsigned), as
// codes_mxfp4_unsigned.
inline __m512i mxfp4_unsigned_512(__m512i nibbles) {
  const __m512i table = _mm512_broadcast_i32x4(
      _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  return _mm512_shuffle_epi8(table, nibbles);
}

// To the nearest integer whatever the thread's rounding mode (the digit planes depend on it).
inline __m512i round_nearest(__m512 x) {
  return _mm512_cvt_roundps_epi32(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

inline __m512i bcast4_512(const void* p) {
  return _mm512_set1_epi32(quant::load_i32(p));
}

// acc + VPDPBUSD(codes, the 4 signed bytes at p in every lane), the bytes read by the instruction's
// own broadcast: GCC loads them into a register first (a vpbroadcastd a dpbusd), two instructions
// to decode where one does, and the tiles issue 8 a token and block.
[[gnu::always_inline]] inline __m512i dpbusd_bcast4(__m512i acc, __m512i codes, const void* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0"
      : "+v"(acc)
      : "v"(codes), "m"(*static_cast<const int32_t*>(p)));
  return acc;
}

// acc + VPDPWSSD(pairs, the int16 pair at p in every lane), read by the instruction's own broadcast
// as dpbusd_bcast4's bytes.
[[gnu::always_inline]] inline __m512i dpwssd_bcast4(__m512i acc, __m512i pairs, const void* p) {
  asm("vpdpwssd %2%{1to16%}, %1, %0"
      : "+v"(acc)
      : "v"(pairs), "m"(*static_cast<const int32_t*>(p)));
  return acc;
}

// Σ_k t_k bsum_k (lane i: row i's t) over a Q8_K block's 16 bsums (int16, at bsums), t given as
// 8 registers of int16 pairs (t_2k, t_2k+1) at pairs: the low-bit tiles' mins and offset terms.
inline __m512i pair_sums(const uint8_t* pairs, const void* bsums) {
  const auto* b = static_cast<const uint8_t*>(bsums);
  __m512i s = _mm512_madd_epi16(load_si(pairs), bcast4_512(b));
#pragma GCC unroll 8
  for (int k = 1; k < 8; ++k)  // VPDPWSSD: madd + add in one (the same integers)
    s = dpwssd_bcast4(s, load_si(pairs + 64 * k), b + 4 * k);
  return s;
}

// A packed q4_K / q5_K block's 6-bit scales and mins (quant::kPackedQ4KScalesOffset: each row's 12
// scale bytes as three dwords in its lane), by scales_mins_k4's word steps on all 16 lanes at once:
// byte k of a lane is that row's scale of sub-block k in sc_lo and of sub-block 4 + k in sc_hi, and
// so for the mins in m_lo / m_hi.
struct K4ScaleBytes {
  __m512i sc_lo, sc_hi, m_lo, m_hi;
};
inline K4ScaleBytes k4_scale_bytes(const uint8_t* packed_block) {
  const uint8_t* p = packed_block + quant::kPackedQ4KScalesOffset;
  const __m512i u0 = _mm512_loadu_si512(p), u1 = _mm512_loadu_si512(p + 64),
                u2 = _mm512_loadu_si512(p + 128);
  const __m512i low6 = _mm512_set1_epi32(0x3f3f3f3f), low4 = _mm512_set1_epi32(0x0f0f0f0f),
                low2 = _mm512_set1_epi32(0x03030303);
  K4ScaleBytes s;
  s.sc_lo = _mm512_and_si512(u0, low6);
  s.sc_hi = _mm512_or_si512(_mm512_and_si512(u2, low4),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u0, 6), low2), 4));
  s.m_lo = _mm512_and_si512(u1, low6);
  s.m_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), low4),
                           _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u1, 6), low2), 4));
  return s;
}
// Bytes 2 half and 2 half + 1 of each lane of `bytes` as an int16 pair (the pair madd takes).
inline __m512i byte_pair_i16(__m512i bytes, int half) {
  const __m512i b = _mm512_srli_epi32(bytes, 16 * half), byte = _mm512_set1_epi32(0xff);
  return _mm512_or_si512(_mm512_and_si512(b, byte),
                         _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(b, 8), byte), 16));
}

// One activation row against packed weights (quant_blocks.h's kPackedQ4K* / kPackedQ6K*:
// gemv_packed_avx512.cpp; kPackedMxfp4*: gemv_mxfp4_avx512.cpp), 16 rows at a time: decode's
// kernels, cheaper per byte than a one-token tile. Rows [r0, r1) are whole groups of 16; every
// token of q is done, one after another.
void gemv_packed_mxfp4(const QuantTask& q, int64_t r0, int64_t r1);
void gemv_packed_q4_k(const QuantTask& q, int64_t r0, int64_t r1);
void gemv_packed_q6_k(const QuantTask& q, int64_t r0, int64_t r1);
void gemv_packed_q2_k(const QuantTask& q, int64_t r0, int64_t r1);
void gemv_packed_q3_k(const QuantTask& q, int64_t r0, int64_t r1);
void gemv_packed_iq4_xs(const QuantTask& q, int64_t r0, int64_t r1);

}  // namespace FAK_ISA_NS

// gemv_lowbit_avx512.cpp: the decode kernels of q2_K, q3_K and iq4_xs (null for other types).
QuantTileFn quant_gemv_lowbit_avx512(QuantType t);
}  // namespace fak::kernels
