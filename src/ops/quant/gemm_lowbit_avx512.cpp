// AVX-512 VNNI prefill tiles for q2_K, q3_K (here) and iq4_xs (gemm_iq4xs_avx512.cpp) against Q8_K
// activations: gemm_lowbit_avx2's
// panels widened to 16 rows in the 16 int32 lanes, vpdpbusd doing 4 code x activation products per
// lane (codes unsigned, activations signed) into int32 with no intermediate rounding or saturation.
//   q2_K    codes premultiplied by their sub-block scale (q * sc <= 45 fits a byte), so a block is
//           64 vpdpbusd into one sum (on AMX: four tile products), and the mins come off as a
//           second fma (as dot_q2_k)
//   q3_K    codes q + 4 in [0, 7]; per sub-block of 16, 4 vpdpbusd, times the signed scale, and
//           4 Σ_k sc_k bsum_k off the block's sum
//   iq4_xs  grid values + 128 in [1, 241]; per sub-block of 32, 8 vpdpbusd, less 128 Σ a, times
//           the scale
// and, where the CPU has AMX-INT8, tiles over the codes times the sub-block scales in planes of one
// scale digit each (amx_planes_pass.h): q2_K one plane, q3_K two, iq4_xs four.
//
// note: bit-identical to the AVX2 tiles and to vec_dot (dot_lowbit_ref.cpp's block-serial rule):
// the integer block sums are exact whatever instructions make them, and per block each lane does
// the same float steps. matmul_quant_test checks the two against each other.
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "core/avx512_warnings.h"  // first: before the intrinsics headers
#include "ops/quant/amx_planes_pass.h"
#include "ops/quant/block_sums_amx.h"
#include "ops/quant/gemm_avx2.h"
#include "ops/quant/packed_lowbit_avx512.h"
#include "ops/quant/panels_avx512.h"
#include "ops/quant/rows_packed16_avx512.h"
#include "ops/quant/rows_panels16_avx512.h"
#include "quant/lowbit_avx2.h"
#include "quant/quant_blocks.h"

namespace fak::kernels {

namespace {

using namespace fak::quant;

// q2_K / q3_K panel block: d[16] (floats), q2_K's dmin[16], q3_K's sc[16] (lane i: row i's signed
// scale of sub-block k, as int32), pairs[8] (lane i: (t_2k, t_2k+1) as int16, t the q2_K mins /
// the q3_K scales), then 64 code registers (register r: elements 4r..4r+3 of row i in lane i;
// q2_K's already times their scale).
template <bool kQ2>
struct Sub16 {
  using Block = std::conditional_t<kQ2, BlockQ2K, BlockQ3K>;
  static constexpr QuantType kType = kQ2 ? QuantType::Q2_K : QuantType::Q3_K;
  static constexpr int kBlock = kQKK;
  static constexpr int kOffSc = 64;  // q3_K's scales; q2_K has its dmin here instead
  static constexpr int kOffPairs = kQ2 ? 128 : kOffSc + 16 * 64;
  static constexpr int kOffCodes = kOffPairs + 8 * 64;
  static constexpr int kPanelBytes = kOffCodes + 64 * 64;
  static constexpr int kTT = 6;

  // Elements 32g .. 32g + 31 of row w as the bytes the tile multiplies.
  static __m256i codes(const Block& w, int g) {
    const __m256i low = low2_codes(load256(w.qs + 32 * (g / 4)), g % 4);
    if constexpr (kQ2) {
      // q * sc per byte (<= 3 * 15, a byte still) as two 16-bit multiplies, the even bytes' and
      // the odd bytes' (shifted down, then back up); both bytes of a 16-bit lane share a scale.
      const __m128i sc = _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales)),
                                       _mm_set1_epi8(0x0F));
      const __m256i s = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sc, sub16_scale_mask(g)));
      const __m256i lo16 = _mm256_and_si256(low, _mm256_set1_epi16(0x00FF));
      const __m256i hi16 = _mm256_srli_epi16(low, 8);
      return _mm256_or_si256(_mm256_mullo_epi16(lo16, s),
                             _mm256_slli_epi16(_mm256_mullo_epi16(hi16, s), 8));
    } else {
      const __m256i high =
          _mm256_and_si256(_mm256_srli_epi16(load256(w.hmask), g), _mm256_set1_epi8(1));
      return _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
    }
  }

  static void prep(const uint8_t* const* rows, int64_t nb, uint8_t* panel, NextRows& next) {
    for (int64_t b = 0; b < nb; ++b) {
      next.upto(b, nb);
      prep_block(rows, b, panel + size_t(b) * kPanelBytes);
    }
  }

  // Block b of the 16 rows as its panel block at p.
  static void prep_block(const uint8_t* const* rows, int64_t b, uint8_t* p) {
    const Block* blk[kRows];
    for (int i = 0; i < kRows; ++i) blk[i] = reinterpret_cast<const Block*>(rows[i]) + b;
    const size_t at = size_t(b) * sizeof(Block);
    store_scales16(rows, at + offsetof(Block, d), p);
    auto* pr32 = reinterpret_cast<uint32_t*>(p + kOffPairs);
    if constexpr (kQ2) {
      store_scales16(rows, at + offsetof(BlockQ2K, dmin), p + 64);
      for (int k = 0; k < 8; ++k)
        for (int i = 0; i < kRows; ++i)
          pr32[kRows * k + i] =
              uint32_t(blk[i]->scales[2 * k] >> 4) | uint32_t(blk[i]->scales[2 * k + 1] >> 4) << 16;
    } else {
      auto* sc32 = reinterpret_cast<int32_t*>(p + kOffSc);
      for (int i = 0; i < kRows; ++i) {
        int8_t sc[16];
        unpack_scales_q3_k(blk[i]->scales, sc);
        for (int k = 0; k < 16; ++k) sc32[kRows * k + i] = sc[k];
        for (int k = 0; k < 8; ++k)
          pr32[kRows * k + i] = uint16_t(sc[2 * k]) | uint32_t(uint16_t(sc[2 * k + 1])) << 16;
      }
    }
    for (int g = 0; g < 8; ++g) {
      __m256i lo[8], hi[8];
      for (int i = 0; i < 8; ++i) {
        lo[i] = codes(*blk[i], g);
        hi[i] = codes(*blk[8 + i], g);
      }
      store_transposed16(lo, hi, p + kOffCodes + 512 * g);
    }
  }

  // The same panel from packed blocks (quant_blocks.h's kPackedQ2K* / kPackedQ3K*): the rows'
  // dwords are in lanes already, so each code register is one packed register's codes
  // (packed_lowbit_avx512.h), and the scales are widened on all 16 rows at once.
  static void prep_packed(const uint8_t* packed, int64_t nb, uint8_t* panel, NextRows& next) {
    prep_packed_range(packed, nb, panel, next, 0, nb);
  }
  // Blocks [b0, b1) of it.
  static void prep_packed_range(const uint8_t* packed, int64_t nb, uint8_t* panel, NextRows& next,
                                int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      next.upto(b, nb);
      prep_packed_block(packed + size_t(b) * kPackedBytes, panel + size_t(b) * kPanelBytes);
    }
  }
  static constexpr size_t kPackedBytes = kQ2 ? kPackedQ2KBlockBytes : kPackedQ3KBlockBytes;
  // The packed block at p as its panel block at out.
  static void prep_packed_block(const uint8_t* p, uint8_t* out) {
    constexpr size_t kCodes = kQ2 ? kPackedQ2KCodesOffset : kPackedQ3KCodesOffset;
    {
      store_f16x16(p, out);
      __m512i sc_bytes[4];  // byte c of register d: the scale of sub-block 4d + c (q3_K: + 32)
      if constexpr (kQ2) {
        store_f16x16(p + 32, out + 64);
        for (int d = 0; d < 4; ++d) {
          const __m512i raw = _mm512_loadu_si512(p + kPackedQ2KScalesOffset + 64 * d);
          sc_bytes[d] = _mm512_and_si512(raw, _mm512_set1_epi32(0x0f0f0f0f));
          const __m512i m =
              _mm512_and_si512(_mm512_srli_epi32(raw, 4), _mm512_set1_epi32(0x0f0f0f0f));
          store_si(out + kOffPairs + 64 * (2 * d), byte_pair_i16(m, 0));
          store_si(out + kOffPairs + 64 * (2 * d + 1), byte_pair_i16(m, 1));
        }
      } else {
        const Q3KScales sc = q3_k_scales_512(p);
        for (int k = 0; k < 16; ++k)
          store_si(out + kOffSc + 64 * k,
                   _mm512_sub_epi32(dword_byte(sc.bytes[k / 4], k % 4), _mm512_set1_epi32(32)));
        for (int k = 0; k < 8; ++k)
          store_si(out + kOffPairs + 64 * k,
                   _mm512_sub_epi16(byte_pair_i16(sc.bytes[k / 2], k % 2), _mm512_set1_epi16(32)));
      }
      for (int n = 0; n < 2; ++n)
        for (int G = 0; G < 8; ++G) {
          const __m512i q = _mm512_loadu_si512(p + kCodes + 64 * (8 * n + G));
          const __m512i h = kQ2 ? q : _mm512_loadu_si512(p + kPackedQ3KHighOffset + 64 * G);
          for (int j = 0; j < 4; ++j) {
            __m512i u = kQ2 ? low2_codes_512(q, j) : q3_k_codes_512(q, h, n, j);
            if constexpr (kQ2) {
              // Times the sub-block's scale as one 32-bit multiply: each byte's product (<= 45)
              // stays in its byte.
              const int k = 8 * n + 2 * j + G / 4;
              u = _mm512_mullo_epi32(u, dword_byte(sc_bytes[k / 4], k % 4));
            }
            store_si(out + kOffCodes + 64 * (32 * n + 8 * j + G), u);
          }
        }
    }
  }

  template <int TT>
  static void tile(const uint8_t* panel, int64_t nb, const TileArgs<TT>& args) {
    __m512 acc[TT];
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = panel + size_t(b) * kPanelBytes;
      const BlockQ8K* a[TT];
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) a[j] = reinterpret_cast<const BlockQ8K*>(args.acts[j]) + b;
      __m512i isum[TT];
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) isum[j] = _mm512_setzero_si512();
#pragma GCC unroll 1
      for (int k = 0; k < 16; ++k) {
        const uint8_t* codes = p + kOffCodes + 256 * k;
        __m512i t[TT];
#pragma GCC unroll 16
        for (int j = 0; j < TT; ++j) t[j] = kQ2 ? isum[j] : _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) {
          const __m512i w = load_si(codes + 64 * g);
#pragma GCC unroll 16
          for (int j = 0; j < TT; ++j) t[j] = dpbusd_bcast4(t[j], w, a[j]->qs + 16 * k + 4 * g);
        }
#pragma GCC unroll 16
        for (int j = 0; j < TT; ++j)
          isum[j] = kQ2 ? t[j]
                        : _mm512_add_epi32(isum[j],
                                           _mm512_mullo_epi32(t[j], load_si(p + kOffSc + 64 * k)));
      }
      const __m512 dw = load_ps(p);
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) {
        const __m512i corr = pair_sums(p + kOffPairs, a[j]->bsums);
        const __m512 da = _mm512_set1_ps(a[j]->d);
        if constexpr (kQ2) {
          acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(isum[j]), acc[j]);
          acc[j] = _mm512_fnmadd_ps(_mm512_mul_ps(load_ps(p + 64), da), _mm512_cvtepi32_ps(corr),
                                    acc[j]);
        } else {
          const __m512i s = _mm512_sub_epi32(isum[j], _mm512_slli_epi32(corr, 2));
          acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(s), acc[j]);
        }
      }
    }
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) _mm512_storeu_ps(args.ys[j], acc[j]);
  }
};

// q2_K on AMX: its panel's codes, already times their sub-block scale (<= 45), are one plane
// (amx_planes_pass.h) the tile unit multiplies by the activations over the whole 256-element block
// (TDPBSUD); then per token the VNNI tile's float steps, the mins term from the activation tile's
// bsums. The same integers, the same steps: the same bits.
struct Q2K : Sub16<true>, AmxPlanes<Q2K> {
  static constexpr int kPlanes = 1, kOffPlanes = kOffCodes, kAmxPanelBytes = kPanelBytes;
  static void prep_amx(const uint8_t* const* rows, int64_t nb, uint8_t* panel, NextRows& next,
                       int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      next.upto(b, nb);
      prep_block(rows, b, panel + size_t(b) * kPanelBytes);
    }
  }
  static void prep_packed_amx(const uint8_t* packed, int64_t nb, uint8_t* panel, NextRows& next,
                              int64_t b0, int64_t b1) {
    prep_packed_range(packed, nb, panel, next, b0, b1);
  }
  static void block_products(const uint8_t* act, const uint8_t* p, int32_t (*sums)[256]) {
    amx_block_sums256x1(act, 256, p + kOffPlanes, sums[0]);
  }
  [[gnu::always_inline]] static void block_float_steps(__m512 acc[16], const int32_t (*sums)[256],
                                                       const uint8_t* p, const uint8_t* act) {
    const __m512 dw = load_ps(p), dmw = load_ps(p + 64);
    const auto* da = reinterpret_cast<const float*>(act + kAmxQ8KActScalesAt);
    const uint8_t* bsums = act + kAmxQ8KActBsumsAt;
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      const __m512i corr = pair_sums(p + kOffPairs, bsums + 32 * j);
      const __m512 dj = _mm512_set1_ps(da[j]);
      acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dj),
                               _mm512_cvtepi32_ps(_mm512_load_si512(sums[0] + 16 * j)), acc[j]);
      acc[j] = _mm512_fnmadd_ps(_mm512_mul_ps(dmw, dj), _mm512_cvtepi32_ps(corr), acc[j]);
    }
  }
};

// q3_K on AMX: the panel's codes (q + 4, 0..7) times the signed sub-block scale in two planes, one
// digit each, sc = d0 + 8 d1 with d0 = sc & 7 in 0..7 and d1 = sc >> 3 in -4..3 (products -28..49,
// signed bytes), made by one byte permute of a 64-entry product table per plane; two tile products
// per 64 elements (TDPBSSD) give S0 + 8 S1 = Σ_k sc_k t_k, the VNNI tile's integer, and the same
// float steps after them: the same bits.
struct Q3K : Sub16<false>, AmxPlanes<Q3K> {
  static constexpr int kPlanes = 2, kOffPlanes = kOffCodes, kPlaneBytes = 64 * 64;
  static constexpr int kAmxPanelBytes = kOffPlanes + kPlanes * kPlaneBytes;
  // Byte 8 d + c of plane j's table: c x (d - 4 j) (plane 1's digit offset by 4 in the index).
  static __m512i product_table(int j) {
    alignas(64) int8_t t[64];
    for (int i = 0; i < 64; ++i) t[i] = int8_t((i % 8) * (i / 8 - 4 * j));
    return _mm512_load_si512(t);
  }
  // A panel block (prep's layout) at v into an AMX panel block at a.
  [[gnu::target("avx512vbmi")]] static void to_planes(const uint8_t* v, uint8_t* a) {
    for (int l = 0; l < kOffCodes / 64; ++l) store_si(a + 64 * l, load_si(v + 64 * l));
    const __m512i t0 = product_table(0), t1 = product_table(1);
    const __m512i spread =
        _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12));
    for (int k = 0; k < 16; ++k) {
      const __m512i sc = _mm512_shuffle_epi8(load_si(v + kOffSc + 64 * k), spread);
      const __m512i hi0 = _mm512_slli_epi16(_mm512_and_si512(sc, _mm512_set1_epi8(7)), 3);
      const __m512i hi1 =
          _mm512_and_si512(_mm512_add_epi8(sc, _mm512_set1_epi8(32)), _mm512_set1_epi8(0x38));
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        const __m512i c = load_si(v + kOffCodes + 64 * (4 * k + g));
        store_si(a + kOffPlanes + 64 * (4 * k + g),
                 _mm512_permutexvar_epi8(_mm512_or_si512(c, hi0), t0));
        store_si(a + kOffPlanes + kPlaneBytes + 64 * (4 * k + g),
                 _mm512_permutexvar_epi8(_mm512_or_si512(c, hi1), t1));
      }
    }
  }
  static void block_products(const uint8_t* act, const uint8_t* p, int32_t (*sums)[256]) {
    amx_block_sums256x2<true>(act, 256, p + kOffPlanes, p + kOffPlanes + kPlaneBytes, sums[0],
                              sums[1]);
  }
  [[gnu::always_inline]] static void block_float_steps(__m512 acc[16], const int32_t (*sums)[256],
                                                       const uint8_t* p, const uint8_t* act) {
    const __m512 dw = load_ps(p);
    const auto* da = reinterpret_cast<const float*>(act + kAmxQ8KActScalesAt);
    const uint8_t* bsums = act + kAmxQ8KActBsumsAt;
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      const __m512i corr = pair_sums(p + kOffPairs, bsums + 32 * j);
      const __m512i isum =
          _mm512_add_epi32(_mm512_load_si512(sums[0] + 16 * j),
                           _mm512_slli_epi32(_mm512_load_si512(sums[1] + 16 * j), 3));
      const __m512i s = _mm512_sub_epi32(isum, _mm512_slli_epi32(corr, 2));
      acc[j] =
          _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(da[j])), _mm512_cvtepi32_ps(s), acc[j]);
    }
  }
};

}  // namespace

QuantTileFn quant_tile_packed_lowbit_avx512(QuantType t) {
  switch (t) {
    case QuantType::Q2_K:
      return rows_packed_repacked<Q2K, gemv_packed_q2_k>;
    case QuantType::Q3_K:
      return rows_packed_repacked<Q3K, gemv_packed_q3_k>;
    case QuantType::IQ4_XS:
      return quant_tile_iq4xs_avx512(true);
    default:
      return nullptr;
  }
}

QuantTileFn quant_tile_lowbit_avx512(QuantType t) {
  switch (t) {
    case QuantType::Q2_K:
      return rows_panels16<Q2K>;
    case QuantType::Q3_K:
      return rows_panels16<Q3K>;
    case QuantType::IQ4_XS:
      return quant_tile_iq4xs_avx512(false);
    default:
      return nullptr;
  }
}

}  // namespace fak::kernels
