// AVX-512 prefill tiles of iq4_xs against Q8_K activations, on rows as stored and packed at load
// (gemm_lowbit_avx512.cpp's scheme): VNNI panel tiles over its grid values + 128, and, where the
// CPU has AMX-INT8, tiles over its grid values times the sub-block scales in four planes of one
// scale digit each (amx_planes_pass.h). Bit-identical to vec_dot (matmul_quant_test).
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

// iq4_xs panel block: d[16] (floats), sc[8] (lane i: row i's scale of sub-block s as int32),
// pairs[8] (lane i: (sc_s, sc_s) as int16, for 128 Σ_s sc_s Σ a off the sum), then 64 code
// registers of grid values + 128 (sub-block s: registers 8s..8s+7).
struct Iq4Xs {
  static constexpr QuantType kType = QuantType::IQ4_XS;
  static constexpr int kBlock = kQKK;
  static constexpr int kOffSc = 64, kOffPairs = kOffSc + 8 * 64, kOffCodes = kOffPairs + 8 * 64;
  static constexpr int kPanelBytes = kOffCodes + 64 * 64;
  static constexpr size_t kPackedBytes = kPackedIq4XsBlockBytes;
  static constexpr int kTT = 6;

  static void prep(const uint8_t* const* rows, int64_t nb, uint8_t* panel, NextRows& next) {
    for (int64_t b = 0; b < nb; ++b) {
      next.upto(b, nb);
      prep_block(rows, b, panel + size_t(b) * kPanelBytes);
    }
  }

  // Block b of the 16 rows as its panel block at p.
  static void prep_block(const uint8_t* const* rows, int64_t b, uint8_t* p) {
    const BlockIq4Xs* blk[kRows];
    for (int i = 0; i < kRows; ++i) blk[i] = reinterpret_cast<const BlockIq4Xs*>(rows[i]) + b;
    store_scales16(rows, size_t(b) * sizeof(BlockIq4Xs), p);
    auto* sc32 = reinterpret_cast<int32_t*>(p + kOffSc);
    auto* pr32 = reinterpret_cast<uint32_t*>(p + kOffPairs);
    for (int s = 0; s < 8; ++s)
      for (int i = 0; i < kRows; ++i) {
        const int ls = iq4_xs_scale(blk[i]->scales_l, blk[i]->scales_h, s);
        sc32[kRows * s + i] = ls;
        pr32[kRows * s + i] = uint16_t(int16_t(ls)) * 0x10001u;
      }
    for (int s = 0; s < 8; ++s) {
      __m256i lo[8], hi[8];
      for (int i = 0; i < 8; ++i) {
        lo[i] = _mm256_xor_si256(codes_iq4(blk[i]->qs + 16 * s), _mm256_set1_epi8(-128));
        hi[i] = _mm256_xor_si256(codes_iq4(blk[8 + i]->qs + 16 * s), _mm256_set1_epi8(-128));
      }
      store_transposed16(lo, hi, p + kOffCodes + 512 * s);
    }
  }

  // The same panel from packed blocks (quant_blocks.h's kPackedIq4Xs*): packed register 4s + G's
  // low nibbles are panel register 8s + G, its high ones 8s + 4 + G.
  static void prep_packed(const uint8_t* packed, int64_t nb, uint8_t* panel, NextRows& next) {
    for (int64_t b = 0; b < nb; ++b) {
      next.upto(b, nb);
      prep_packed_block(packed + size_t(b) * kPackedIq4XsBlockBytes,
                        panel + size_t(b) * kPanelBytes);
    }
  }
  // The packed block at p as its panel block at out.
  static void prep_packed_block(const uint8_t* p, uint8_t* out) {
    const __m512i m0f = _mm512_set1_epi8(0x0F), grid = iq4_grid_unsigned_512();
    {
      store_f16x16(p, out);
      const __m512i low = _mm512_loadu_si512(p + kPackedIq4XsLowOffset);
      const __m512i high = iq4_xs_scales_high_512(p);
      for (int s = 0; s < 8; ++s) {
        const __m512i ls = iq4_xs_scale_512(low, high, s);
        store_si(out + kOffSc + 64 * s, ls);
        store_si(out + kOffPairs + 64 * s,
                 _mm512_or_si512(_mm512_and_si512(ls, _mm512_set1_epi32(0xffff)),
                                 _mm512_slli_epi32(ls, 16)));
        for (int G = 0; G < 4; ++G) {
          const __m512i raw = _mm512_loadu_si512(p + kPackedIq4XsCodesOffset + 64 * (4 * s + G));
          store_si(out + kOffCodes + 64 * (8 * s + G),
                   _mm512_shuffle_epi8(grid, _mm512_and_si512(raw, m0f)));
          store_si(out + kOffCodes + 64 * (8 * s + 4 + G),
                   _mm512_shuffle_epi8(grid, _mm512_and_si512(_mm512_srli_epi16(raw, 4), m0f)));
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
      for (int s = 0; s < 8; ++s) {
        const uint8_t* codes = p + kOffCodes + 512 * s;
        __m512i t[TT];
#pragma GCC unroll 16
        for (int j = 0; j < TT; ++j) t[j] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) {
          const __m512i w = load_si(codes + 64 * g);
#pragma GCC unroll 16
          for (int j = 0; j < TT; ++j) t[j] = dpbusd_bcast4(t[j], w, a[j]->qs + 32 * s + 4 * g);
        }
        const __m512i sc = load_si(p + kOffSc + 64 * s);
#pragma GCC unroll 16
        for (int j = 0; j < TT; ++j)
          isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(t[j], sc));
      }
      const __m512 dw = load_ps(p);
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) {
        // Σ_s sc_s Σ (g + 128) a = Σ_s sc_s Σ g a + 128 Σ_s sc_s (bsum_2s + bsum_2s+1).
        const __m512i s =
            _mm512_sub_epi32(isum[j], _mm512_slli_epi32(pair_sums(p + kOffPairs, a[j]->bsums), 7));
        acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(a[j]->d)), _mm512_cvtepi32_ps(s),
                                 acc[j]);
      }
    }
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) _mm512_storeu_ps(args.ys[j], acc[j]);
  }
};

// iq4_xs on AMX: its grid values (signed, -127..113) times the signed sub-block scale in four
// planes, one balanced ternary digit each (sc = d0 + 3 d1 + 9 d2 + 27 d3, digits -1..1, so a
// product is a grid value or its negation, a signed byte); four tile products per plane and block
// (TDPBSSD) give Σ_s sc_s Σ g a, the VNNI tile's integer after its 128 Σ sc bsum correction, then
// its float step: the same bits.
struct Iq4XsAmx : Iq4Xs, AmxPlanes<Iq4XsAmx> {
  static constexpr int kPlanes = 4, kOffPlanes = kOffCodes, kPlaneBytes = 64 * 64;
  static constexpr int kAmxPanelBytes = kOffPlanes + kPlanes * kPlaneBytes;
  // A panel block (prep's layout) at v into an AMX panel block at a.
  static void to_planes(const uint8_t* v, uint8_t* a) {
    for (int l = 0; l < kOffCodes / 64; ++l) store_si(a + 64 * l, load_si(v + 64 * l));
    const __m512 third = _mm512_set1_ps(1.0f / 3.0f);
    const __m512i three = _mm512_set1_epi32(3);
    const __m512i spread =
        _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12));
    for (int s = 0; s < 8; ++s) {
      // Rounded to nearest (a third is never half-way), so each remainder is -1..1.
      __m512i q = load_si(v + kOffSc + 64 * s);
      __mmask64 pos[kPlanes], neg[kPlanes];
#pragma GCC unroll 4
      for (int j = 0; j < kPlanes; ++j) {
        const __m512i next = j + 1 < kPlanes
                                 ? round_nearest(_mm512_mul_ps(_mm512_cvtepi32_ps(q), third))
                                 : _mm512_setzero_si512();
        const __m512i d =
            _mm512_shuffle_epi8(_mm512_sub_epi32(q, _mm512_mullo_epi32(next, three)), spread);
        pos[j] = _mm512_cmpeq_epi8_mask(d, _mm512_set1_epi8(1));
        neg[j] = _mm512_cmpeq_epi8_mask(d, _mm512_set1_epi8(-1));
        q = next;
      }
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        const __m512i grid =
            _mm512_xor_si512(load_si(v + kOffCodes + 64 * (8 * s + g)), _mm512_set1_epi8(-128));
#pragma GCC unroll 4
        for (int j = 0; j < kPlanes; ++j)
          store_si(a + kOffPlanes + kPlaneBytes * j + 64 * (8 * s + g),
                   _mm512_mask_sub_epi8(_mm512_maskz_mov_epi8(pos[j], grid), neg[j],
                                        _mm512_setzero_si512(), grid));
      }
    }
  }
  static void block_products(const uint8_t* act, const uint8_t* p, int32_t (*sums)[256]) {
    const uint8_t* planes = p + kOffPlanes;
    amx_block_sums256x2<true>(act, 256, planes, planes + kPlaneBytes, sums[0], sums[1]);
    amx_block_sums256x2<true>(act, 256, planes + 2 * kPlaneBytes, planes + 3 * kPlaneBytes, sums[2],
                              sums[3]);
  }
  [[gnu::always_inline]] static void block_float_steps(__m512 acc[16], const int32_t (*sums)[256],
                                                       const uint8_t* p, const uint8_t* act) {
    const __m512 dw = load_ps(p);
    const auto* da = reinterpret_cast<const float*>(act + kAmxQ8KActScalesAt);
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      // S0 + 3 (S1 + 3 (S2 + 3 S3)), 3 x as x + 2 x.
      __m512i s = _mm512_load_si512(sums[3] + 16 * j);
#pragma GCC unroll 3
      for (int k = 2; k >= 0; --k)
        s = _mm512_add_epi32(_mm512_load_si512(sums[k] + 16 * j),
                             _mm512_add_epi32(s, _mm512_slli_epi32(s, 1)));
      acc[j] =
          _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(da[j])), _mm512_cvtepi32_ps(s), acc[j]);
    }
  }
};

}  // namespace

QuantTileFn quant_tile_iq4xs_avx512(bool packed) {
  return packed ? rows_packed_repacked<Iq4XsAmx, gemv_packed_iq4_xs> : rows_panels16<Iq4XsAmx>;
}

}  // namespace fak::kernels
