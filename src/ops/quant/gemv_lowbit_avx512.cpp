// AVX-512 VNNI decode kernels (one activation row, a few at most) of q2_K, q3_K and iq4_xs: 16
// weight rows read in their stored layout, each row's super-block multiplied in 512-bit registers,
// then the 16 rows' partial sums reduced into one register (lane i: row i) for the block's float
// steps.
//
// These are the stored rows' kernels: a model read into memory packs its low-bit weights at load
// and decodes them with gemv_packed_avx512.cpp's, faster still; a model mapped from its file keeps
// its rows as stored. The AVX2 kernel (gemv_lowbit_avx2.cpp) did a row's block in 32-element
// steps, each a nibble or 2-bit unpack, a sign trick, maddubs, a scale broadcast from scalar code
// and madd. Here:
// - the activation is copied once per call into the order the code registers hold their elements
//   (q2_K / q3_K: a register of the 2-bit codes at shift 2j holds elements 32j.. and 128 + 32j..;
//   iq4_xs: a register of 64 code bytes holds four sub-blocks' low nibbles, elements 0..15 of each,
//   or their high ones), so each code register meets its activations in one load;
// - q2_K / q3_K: maddubs makes the code x activation pairs, and one vpdpwssd applies the 16-element
//   sub-block scales, picked per 128-bit lane by vpermw (a lane of pairs is one sub-block);
//   q3_K's high bit comes in through a 16-entry table (vpshufb on the four hmask bits of a byte);
// - iq4_xs: vpdpbusd on the grid values + 128 (vpshufb's table), from an accumulator that starts at
//   -128 x the activations it will meet (copied with the activation), then times the sub-block
//   scale lane by lane.
// 4864 x 1024 rows from the cache, two threads (matmul_quant_bench *_decode, FAK_ISA=avx2 for the
// AVX2 kernel, alternated): q2_K 18.6-20.2 -> 23.6-23.7 GB/s, q3_K 17.5 -> 24.0-24.4, iq4_xs 22.1-
// 22.2 -> 36.2-36.5.
//
// note: bit-identical to the AVX2 kernel and to vec_dot (dot_lowbit_ref.cpp's block-serial rule):
// each row's integer block sums are exact whatever order makes them, and per block each lane does
// the AVX2 kernel's float steps. matmul_quant_test compares them.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/avx512_warnings.h"  // first: before the intrinsics headers
#include "ops/quant/gemm_avx2.h"
#include "ops/quant/panels_avx512.h"
#include "quant/lowbit_avx2.h"
#include "quant/quant_blocks.h"

namespace fak::kernels {

namespace {

using namespace fak::quant;

inline __m512i load_a(const uint8_t* p) {
  return _mm512_load_si512(reinterpret_cast<const __m512i*>(p));
}
inline __m512i load_u(const uint8_t* p) {
  return _mm512_loadu_si512(p);
}
inline __m256i load_a256(const uint8_t* p) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
}

// a, b -> per 128-bit lane [a0 + a2, b0 + b2, a1 + a3, b1 + b3].
inline __m512i fold2(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}
// Four rows' registers -> per 128-bit lane L, dword i: the sum of row i's four dwords of lane L.
inline __m512i fold4(__m512i a, __m512i b, __m512i c, __m512i d) {
  const __m512i ab = fold2(a, b), cd = fold2(c, d);
  return _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
}
// x0..x3 from fold4 (rows 4m..4m+3 in x_m) -> [x0's lanes 0 + 1, x0's 2 + 3, x1's 0 + 1, x1's 2 +
// 3].
inline __m512i fold_lane_pairs(__m512i x0, __m512i x1) {
  return _mm512_add_epi32(_mm512_shuffle_i32x4(x0, x1, _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_i32x4(x0, x1, _MM_SHUFFLE(3, 1, 3, 1)));
}

// The 16 rows' block b as an int32 register each, reduced: lane i of the result is the sum of
// row i's 16 dwords (kDual: of its dwords 0..7, and in *second those of 8..15).
template <bool kDual, class RowSums>
[[gnu::always_inline]] inline __m512i reduce_rows16(RowSums row_sums, __m512i* second) {
  __m512i x[4];
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m)
    x[m] = fold4(row_sums(4 * m), row_sums(4 * m + 1), row_sums(4 * m + 2), row_sums(4 * m + 3));
  const __m512i y01 = fold_lane_pairs(x[0], x[1]), y23 = fold_lane_pairs(x[2], x[3]);
  if constexpr (kDual) {
    // y: [x0 lanes 0-1, x0 lanes 2-3, x1 lanes 0-1, x1 lanes 2-3]: the first sums are lanes 0, 2.
    *second = _mm512_shuffle_i32x4(y01, y23, _MM_SHUFFLE(3, 1, 3, 1));
    return _mm512_shuffle_i32x4(y01, y23, _MM_SHUFFLE(2, 0, 2, 0));
  } else {
    (void)second;
    return fold_lane_pairs(y01, y23);
  }
}

// The 16 fp16 numbers at row i's byte offset `at` (+ 2 if kHigh: the high half of the dword read),
// as floats. The dword read stays inside the row's block (Kind::kScaleDword).
template <bool kHigh>
inline __m512 gather_f16x16(const uint8_t* group, __m512i row_offsets, size_t at) {
  __m512i v = _mm512_i32gather_epi32(_mm512_add_epi32(row_offsets, _mm512_set1_epi32(int32_t(at))),
                                     group, 1);
  if constexpr (kHigh) v = _mm512_srli_epi32(v, 16);
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

// q2_K / q3_K activation order: register j (64 bytes) holds elements 32j..32j+31 and
// 128 + 32j..128 + 32j + 31 (the 2-bit codes at shift 2j of qs[0..63]), then the 16 sub-block sums
// times kSumFactor as int16 (q2_K: 1, for the mins; q3_K: -4, the code offset).
template <int kSumFactor>
struct Sub16Act {
  static constexpr size_t kBytes = 4 * 64 + 64;
  static void prep(const BlockQ8K& a, uint8_t* out) {
    for (int j = 0; j < 4; ++j) {
      std::memcpy(out + 64 * j, a.qs + 32 * j, 32);
      std::memcpy(out + 64 * j + 32, a.qs + 128 + 32 * j, 32);
    }
    auto* sums = reinterpret_cast<int16_t*>(out + 256);
    for (int k = 0; k < 16; ++k) sums[k] = int16_t(kSumFactor * a.bsums[k]);
  }
};

// vpermw indices for shift group j: a 128-bit lane L of maddubs' pairs is sub-block
// 8 (L / 2) + 2j + L % 2 (elements 128 (L / 2) + 32j + 16 (L % 2)..).
inline __m512i sub16_scale_index(int j) {
  alignas(64) int16_t idx[32];
  for (int w = 0; w < 32; ++w) idx[w] = int16_t(8 * (w / 16) + 2 * j + (w / 8) % 2);
  return _mm512_load_si512(idx);
}

struct Sub16Consts {
  __m512i index[4];
  Sub16Consts() {
    for (int j = 0; j < 4; ++j) index[j] = sub16_scale_index(j);
  }
};

// Σ_j maddubs(codes_j, act_j) . scales, the codes of shift group j given by code(j).
template <class Code>
[[gnu::always_inline]] inline __m512i sub16_products(const uint8_t* act, __m512i scale_words,
                                                     const Sub16Consts& c, __m512i acc, Code code) {
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512i p = _mm512_maddubs_epi16(code(j), load_a(act + 64 * j));
    acc = _mm512_dpwssd_epi32(acc, p, _mm512_permutexvar_epi16(c.index[j], scale_words));
  }
  return acc;
}

struct Q2K {
  static constexpr QuantType kType = QuantType::Q2_K;
  using Block = BlockQ2K;
  using Act = Sub16Act<1>;
  static constexpr bool kDual = true;                        // Σ sc q a, and the mins Σ m bsum
  static constexpr size_t kScaleDword = offsetof(Block, d);  // d, then dmin

  struct Consts : Sub16Consts {};

  [[gnu::always_inline]] static __m512i row_sums(const Block& w, const uint8_t* act,
                                                 const Consts& c) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales));
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m512i sc = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(packed, m4)));
    const __m256i mins = _mm256_madd_epi16(
        _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4)), load_a256(act + 256));
    const __m512i q = load_u(w.qs);
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m512i s = sub16_products(
        act, sc, c, _mm512_setzero_si512(), [&](int j) __attribute__((always_inline)) {
          return _mm512_and_si512(_mm512_srli_epi16(q, 2 * j), m3);
        });
    const __m256i main8 =
        _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
    return _mm512_inserti64x4(_mm512_castsi256_si512(main8), mins, 1);
  }

  static __m512 finish(const uint8_t* group, __m512i row_offsets, size_t at, float da, __m512i isum,
                       __m512i imin, __m512 acc) {
    const __m512i dd = _mm512_i32gather_epi32(
        _mm512_add_epi32(row_offsets, _mm512_set1_epi32(int32_t(at + kScaleDword))), group, 1);
    const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
    const __m512 dmw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
    const __m512 va = _mm512_set1_ps(da);
    acc = _mm512_fmadd_ps(_mm512_mul_ps(dw, va), _mm512_cvtepi32_ps(isum), acc);
    return _mm512_fnmadd_ps(_mm512_mul_ps(dmw, va), _mm512_cvtepi32_ps(imin), acc);
  }
};

struct Q3K {
  static constexpr QuantType kType = QuantType::Q3_K;
  using Block = BlockQ3K;
  using Act = Sub16Act<-4>;
  static constexpr bool kDual = false;
  // d is the block's last two bytes: the dword read ends with it.
  static constexpr size_t kScaleDword = offsetof(Block, d) - 2;

  struct Consts : Sub16Consts {
    __m512i high[4];  // 4 x bit j of the 4-bit index, as a vpshufb table
    Consts() {
      for (int j = 0; j < 4; ++j) {
        alignas(16) int8_t t[16];
        for (int v = 0; v < 16; ++v) t[v] = int8_t(((v >> j) & 1) << 2);
        high[j] = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
      }
    }
  };

  [[gnu::always_inline]] static __m512i row_sums(const Block& w, const uint8_t* act,
                                                 const Consts& c) {
    const __m512i sc = _mm512_zextsi256_si512(_mm256_cvtepi8_epi16(scales_q3_k(w.scales)));
    // Σ_k sc_k (-4 bsum_k): the offset of the codes u = q + 4 off the block's sum.
    const __m512i offset =
        _mm512_zextsi256_si512(_mm256_madd_epi16(_mm512_castsi512_si256(sc), load_a256(act + 256)));
    // Byte (n, m) of hmask, n the 64-byte half of qs: bits 4n..4n+3 are the high bits of shift
    // groups 0..3, brought down to bits 0..3 (the upper half of each word shifted by 4).
    const __m512i hm = _mm512_broadcast_i64x4(quant::load256(w.hmask));
    const __m512i hm4 = _mm512_and_si512(
        _mm512_srlv_epi16(
            hm, _mm512_set_epi64(0x0004000400040004LL, 0x0004000400040004LL, 0x0004000400040004LL,
                                 0x0004000400040004LL, 0, 0, 0, 0)),
        _mm512_set1_epi8(0x0F));
    const __m512i q = load_u(w.qs);
    const __m512i m3 = _mm512_set1_epi8(3);
    return sub16_products(
        act, sc, c, offset, [&](int j) __attribute__((always_inline)) {
          // (q >> 2j) & 3 in bits 0-1, 4 x the high bit in bit 2 (the table has nothing else).
          return _mm512_ternarylogic_epi32(_mm512_srli_epi16(q, 2 * j),
                                           _mm512_shuffle_epi8(c.high[j], hm4), m3, 0xE4);
        });
  }

  static __m512 finish(const uint8_t* group, __m512i row_offsets, size_t at, float da, __m512i isum,
                       __m512i, __m512 acc) {
    const __m512 dw = gather_f16x16<true>(group, row_offsets, at + kScaleDword);
    return _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(da)), _mm512_cvtepi32_ps(isum), acc);
  }
};

// iq4_xs activation order: for each half c (sub-blocks 4c..4c+3, code bytes 64c..64c+63), the
// low-nibble elements 32s + (0..15) of its four sub-blocks, then the high-nibble ones 32s + 16..,
// then per half -128 x the sum of the 8 activations each dword lane of the two meets.
struct Iq4XsAct {
  static constexpr size_t kBytes = 4 * 64 + 2 * 64;
  static void prep(const BlockQ8K& a, uint8_t* out) {
    for (int c = 0; c < 2; ++c) {
      for (int g = 0; g < 4; ++g) {
        std::memcpy(out + 128 * c + 16 * g, a.qs + 32 * (4 * c + g), 16);
        std::memcpy(out + 128 * c + 64 + 16 * g, a.qs + 32 * (4 * c + g) + 16, 16);
      }
      const __m512i ones = _mm512_set1_epi8(1);
      const __m512i s = _mm512_dpbusd_epi32(
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, load_a(out + 128 * c)), ones,
          load_a(out + 128 * c + 64));
      _mm512_store_si512(out + 256 + 64 * c,
                         _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(s, 7)));
    }
  }
};

struct Iq4Xs {
  static constexpr QuantType kType = QuantType::IQ4_XS;
  using Block = BlockIq4Xs;
  using Act = Iq4XsAct;
  static constexpr bool kDual = false;
  static constexpr size_t kScaleDword = offsetof(Block, d);

  struct Consts {
    __m512i grid;                         // the grid values + 128, as a vpshufb table
    __m512i low_shift[2], high_shift[2];  // per dword lane of half c: sub-block s = 4c + lane / 4
    Consts() {
      alignas(16) uint8_t t[16];
      for (int v = 0; v < 16; ++v) t[v] = uint8_t(kIq4nlValues[v] + 128);
      grid = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
      for (int c = 0; c < 2; ++c) {
        alignas(64) int32_t lo[16], hi[16];
        for (int k = 0; k < 16; ++k) {
          const int s = 4 * c + k / 4;
          lo[k] = 4 * s;       // nibble s % 2 of scales_l[s / 2], in the dword of scales_l
          hi[k] = 12 + 2 * s;  // bits 2s of scales_h (bits 16.. of the first dword) to bit 4
        }
        low_shift[c] = _mm512_load_si512(lo);
        high_shift[c] = _mm512_load_si512(hi);
      }
    }
  };

  [[gnu::always_inline]] static __m512i row_sums(const Block& w, const uint8_t* act,
                                                 const Consts& c) {
    const __m512i m0f = _mm512_set1_epi8(0x0F);
    const __m512i low4 = _mm512_set1_epi32(int32_t(load_i32(w.scales_l)));
    const __m512i high2 = _mm512_set1_epi32(int32_t(load_i32(&w)));  // d, scales_h
    __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i raw = load_u(w.qs + 64 * h);
      const __m512i lo = _mm512_shuffle_epi8(c.grid, _mm512_and_si512(raw, m0f));
      const __m512i hi =
          _mm512_shuffle_epi8(c.grid, _mm512_and_si512(_mm512_srli_epi16(raw, 4), m0f));
      __m512i t = _mm512_dpbusd_epi32(load_a(act + 256 + 64 * h), lo, load_a(act + 128 * h));
      t = _mm512_dpbusd_epi32(t, hi, load_a(act + 128 * h + 64));
      // ls - 32: the low 4 bits from scales_l, bits 4-5 from scales_h.
      const __m512i ls =
          _mm512_and_si512(_mm512_ternarylogic_epi32(_mm512_srlv_epi32(low4, c.low_shift[h]),
                                                     _mm512_srlv_epi32(high2, c.high_shift[h]),
                                                     _mm512_set1_epi32(0x0F), 0xE4),
                           _mm512_set1_epi32(0x3F));
      sum =
          _mm512_add_epi32(sum, _mm512_mullo_epi32(t, _mm512_sub_epi32(ls, _mm512_set1_epi32(32))));
    }
    return sum;
  }

  static __m512 finish(const uint8_t* group, __m512i row_offsets, size_t at, float da, __m512i isum,
                       __m512i, __m512 acc) {
    const __m512 dw = gather_f16x16<false>(group, row_offsets, at + kScaleDword);
    return _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(da)), _mm512_cvtepi32_ps(isum), acc);
  }
};

// Rows [r0, r1) for every token: whole groups of 16 rows here, the rows left over by the AVX2
// kernel (8-row panels, then vec_dot), which gives the same bits.
template <class Kind>
void rows_gemv16(const QuantTask& q, int64_t r0, int64_t r1) {
  using Block = typename Kind::Block;
  using Act = typename Kind::Act;
  const int64_t nb = q.w->cols / kQKK;
  struct alignas(64) Line {
    uint8_t bytes[64];
  };
  thread_local std::vector<Line> prepared;
  prepared.resize(size_t(q.n_tokens) * size_t(nb) * Act::kBytes / 64);
  auto* act = reinterpret_cast<uint8_t*>(prepared.data());
  for (int t = 0; t < q.n_tokens; ++t) {
    const auto* a = reinterpret_cast<const BlockQ8K*>(q.act + size_t(t) * q.act_row_bytes);
    for (int64_t b = 0; b < nb; ++b)
      Act::prep(a[b], act + (size_t(t) * size_t(nb) + size_t(b)) * Act::kBytes);
  }
  static const typename Kind::Consts consts;
  const typename Kind::Consts c = consts;
  const size_t row_bytes = q.w->row_bytes, group_bytes = size_t(kRows) * row_bytes;
  const __m512i row_offsets =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(int32_t(row_bytes)));
  const int64_t r_end = r0 + (r1 - r0) / kRows * kRows;
  for (int64_t r = r0; r < r_end; r += kRows) {
    const uint8_t* group = q.w->row(r);
    // The 16 rows are 16 interleaved streams, which the hardware prefetchers follow badly: the
    // next group (contiguous) is prefetched evenly over this one's blocks (see NextRows).
    NextRows next;
    if (r + 2 * kRows <= q.w->rows) next = {group + group_bytes, group_bytes, 0};
    for (int t = 0; t < q.n_tokens; ++t) {
      const auto* a = reinterpret_cast<const BlockQ8K*>(q.act + size_t(t) * q.act_row_bytes);
      const uint8_t* at = act + size_t(t) * size_t(nb) * Act::kBytes;
      __m512 acc = _mm512_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) {
        if (t == 0) next.upto(b, nb);
        const size_t off = size_t(b) * sizeof(Block);
        const uint8_t* ab = at + size_t(b) * Act::kBytes;
        __m512i second = _mm512_setzero_si512();
        const __m512i isum = reduce_rows16<Kind::kDual>(
            [&](int i) __attribute__((always_inline)) {
              return Kind::row_sums(
                  *reinterpret_cast<const Block*>(group + size_t(i) * row_bytes + off), ab, c);
            },
            &second);
        acc = Kind::finish(group, row_offsets, off, a[b].d, isum, second, acc);
      }
      _mm512_storeu_ps(q.y + size_t(t) * size_t(q.w->rows) + size_t(r), acc);
    }
  }
  if (r_end < r1) quant_gemv_lowbit_avx2(Kind::kType)(q, r_end, r1);
}

}  // namespace

QuantTileFn quant_gemv_lowbit_avx512(QuantType t) {
  switch (t) {
    case QuantType::Q2_K:
      return rows_gemv16<Q2K>;
    case QuantType::Q3_K:
      return rows_gemv16<Q3K>;
    case QuantType::IQ4_XS:
      return rows_gemv16<Iq4Xs>;
    default:
      return nullptr;
  }
}

}  // namespace fak::kernels
