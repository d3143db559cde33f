// AVX-512 prefill tiles of q6_K (against Q8_K activations), on rows as stored and packed at load:
// VNNI panel tiles (gemm_avx512.cpp's scheme) and, where the CPU has AMX-INT8, tiles whose panels
// hold the codes times the sub-block scales in planes of one scale digit each (as
// gemm_k4_avx512.cpp's). Both make the integers vec_dot makes, and per block the same float steps
// in the same order: the same bits (matmul_quant_test).
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "core/avx512_warnings.h"  // first: before the intrinsics headers
#include "ops/quant/amx_planes_pass.h"
#include "ops/quant/block_sums_amx.h"
#include "ops/quant/gemm_avx2.h"
#include "ops/quant/panels_avx512.h"
#include "ops/quant/rows_packed16_avx512.h"
#include "ops/quant/rows_panels16_avx512.h"
#include "quant/packed_blocks.h"
#include "quant/quant_blocks.h"

namespace fak::kernels {

namespace {

using namespace fak::quant;

// q6_K panel block: d[16], sc[16 sub-blocks] (lane i: scale of row i as int32), scp[8] (lane i:
// the int16 pair (sc_2k, sc_2k+1)), then 8 x 8 registers of codes in [0, 63] (32-element slice e,
// group g: codes 32e + 4g .. +3 of row i in lane i).
struct Q6K : AmxPlanes<Q6K> {
  static constexpr QuantType kType = QuantType::Q6_K;
  static constexpr int kBlock = kQKK;
  static constexpr int kOffSc = 64, kOffScp = kOffSc + 16 * 64, kOffCodes = kOffScp + 8 * 64;
  static constexpr int kPanelBytes = kOffCodes + 64 * 64;
  static constexpr int kTT = 6;

  // Elements 32e .. 32e + 31 of a q6_K block as bytes in [0, 63] (as dot_q6_k in dot_avx2.cpp).
  static __m256i codes(const BlockQ6K& w, int e) {
    const int h = e / 4, g = e % 4;
    const __m256i ql = load256(w.ql + 64 * h + 32 * (g & 1));
    const __m256i qh = load256(w.qh + 32 * h);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
    const __m256i lo =
        g < 2 ? _mm256_and_si256(ql, m4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
    const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), m2);
    return _mm256_or_si256(lo, _mm256_slli_epi16(hb, 4));
  }

  // Block b of 16 rows into a panel block at p.
  static void prep_block(const uint8_t* const* rows, int64_t b, uint8_t* p) {
    const BlockQ6K* blk[kRows];
    for (int i = 0; i < kRows; ++i) blk[i] = reinterpret_cast<const BlockQ6K*>(rows[i]) + b;
    store_scales16(rows, size_t(b) * sizeof(BlockQ6K) + offsetof(BlockQ6K, d), p);
    auto* sc32 = reinterpret_cast<int32_t*>(p + kOffSc);
    auto* scp32 = reinterpret_cast<uint32_t*>(p + kOffScp);
    for (int k = 0; k < 16; ++k)
      for (int i = 0; i < kRows; ++i) sc32[kRows * k + i] = blk[i]->scales[k];
    for (int k = 0; k < 8; ++k)
      for (int i = 0; i < kRows; ++i)
        scp32[kRows * k + i] =
            uint16_t(blk[i]->scales[2 * k]) | uint32_t(uint16_t(blk[i]->scales[2 * k + 1])) << 16;
    for (int e = 0; e < 8; ++e) {
      __m256i lo[8], hi[8];
      for (int i = 0; i < 8; ++i) {
        lo[i] = codes(*blk[i], e);
        hi[i] = codes(*blk[8 + i], e);
      }
      store_transposed16(lo, hi, p + kOffCodes + 512 * e);
    }
  }

  static void prep(const uint8_t* const* rows, int64_t nb, uint8_t* panel, NextRows& next) {
    for (int64_t b = 0; b < nb; ++b) {
      next.upto(b, nb);
      prep_block(rows, b, panel + size_t(b) * kPanelBytes);
    }
  }

  // A packed block's scales (quant::kPackedQ6K*), per lane: the 16 sub-block scales sign-extended
  // to int32 and the pairs (sc_2k, sc_2k+1) as int16 pairs, as prep stores them.
  static void widen_scales(const uint8_t* p, int32_t (*sc_lanes)[kRows], __m512i* scp) {
    const __m512i lo16 = _mm512_set1_epi32(0xffff);
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m) {
      const __m512i v = _mm512_loadu_si512(p + quant::kPackedQ6KScalesOffset + 64 * m);
      __m512i x[4];
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        x[c] = _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * c), 24);
        _mm512_store_si512(sc_lanes[4 * m + c], x[c]);
      }
      scp[2 * m] = _mm512_or_si512(_mm512_and_si512(x[0], lo16), _mm512_slli_epi32(x[1], 16));
      scp[2 * m + 1] = _mm512_or_si512(_mm512_and_si512(x[2], lo16), _mm512_slli_epi32(x[3], 16));
    }
  }

  // Codes 4G..4G+3 (G = 4 (k % 2) + g) of slice e = k / 2 of a packed block, as codes(w, e)
  // makes them: the ql nibbles of dword 16h + 8 (e % 2) + G and bits 2 (e % 4) of qh dword 8h + G.
  static __m512i widen_codes(const uint8_t* p, int k, int g) {
    const int e = k / 2, h = e / 4, gg = e % 4, G = 4 * (k % 2) + g;
    const __m512i ql =
        _mm512_loadu_si512(p + quant::kPackedQ6KLowOffset + 64 * (16 * h + 8 * (gg & 1) + G));
    const __m512i qh = _mm512_loadu_si512(p + quant::kPackedQ6KHighOffset + 64 * (8 * h + G));
    const __m512i lo =
        _mm512_and_si512(gg < 2 ? ql : _mm512_srli_epi16(ql, 4), _mm512_set1_epi8(0x0F));
    const __m512i hb = _mm512_and_si512(_mm512_srli_epi16(qh, 2 * gg), _mm512_set1_epi8(0x03));
    return _mm512_or_si512(lo, _mm512_slli_epi16(hb, 4));
  }

  // This call's own panel from packed blocks (see K4::prep_packed).
  static void prep_packed(const uint8_t* packed, int64_t nb, uint8_t* panel, NextRows& next) {
    for (int64_t b = 0; b < nb; ++b) {
      next.upto(b, nb);
      const uint8_t* pk = packed + size_t(b) * size_t(quant::kPackedQ6KBlockBytes);
      uint8_t* p = panel + size_t(b) * kPanelBytes;
      store_f16x16(pk, p);
      __m512i scp[8];
      widen_scales(pk, reinterpret_cast<int32_t(*)[kRows]>(p + kOffSc), scp);
      for (int k = 0; k < 8; ++k) _mm512_store_si512(p + kOffScp + 64 * k, scp[k]);
      for (int k = 0; k < 16; ++k)
        for (int g = 0; g < 4; ++g)
          _mm512_store_si512(p + kOffCodes + 256 * k + 64 * g, widen_codes(pk, k, g));
    }
  }

  // The AMX panel: d, then the codes less 32 (signed) times the sub-block scale in three planes,
  // one balanced base-7 digit of the scale each (sc = d0 + 7 d1 + 49 d2, each digit in -3..3, so
  // a product is at most 96 in size, a signed byte): three tile products over the whole 256
  // elements (signed by signed: no -32 correction after them) give S0 + 7 S1 + 49 S2 =
  // Σ_k sc_k (Σ c a - 32 bsum_k), the integer the VNNI tiles make (exact either way).
  static constexpr int kPlanes = 3, kOffPlanes = 64, kPlaneBytes = 64 * 64;
  static constexpr int kAmxPanelBytes = kOffPlanes + kPlanes * kPlaneBytes;

  // Sub-block k's codes (codes(g), g = 0..3, the panel's registers, 0..63) into the planes at a
  // for the scales sc (each lane's as an int32): (code - 32) x digit by masked byte adds of it
  // and twice it, negated where the digit is.
  template <class Codes>
  [[gnu::always_inline]] static void store_planes(__m512i sc, int k, Codes codes, uint8_t* a) {
    const __m512 seventh = _mm512_set1_ps(1.0f / 7.0f);
    const __m512i seven = _mm512_set1_epi32(7);
    // Rounded to nearest (sc / 7 is never half-way), so each remainder is in -3..3.
    const __m512i q1 = round_nearest(_mm512_mul_ps(_mm512_cvtepi32_ps(sc), seventh));
    const __m512i q2 = round_nearest(_mm512_mul_ps(_mm512_cvtepi32_ps(q1), seventh));
    const __m512i digit[kPlanes] = {_mm512_sub_epi32(sc, _mm512_mullo_epi32(q1, seven)),
                                    _mm512_sub_epi32(q1, _mm512_mullo_epi32(q2, seven)), q2};
    const __m512i spread =
        _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12));
    __mmask64 one[kPlanes], two[kPlanes], neg[kPlanes];
#pragma GCC unroll 3
    for (int j = 0; j < kPlanes; ++j) {
      const __m512i d = _mm512_shuffle_epi8(digit[j], spread);  // the digit in each byte
      const __m512i m = _mm512_abs_epi8(d);
      neg[j] = _mm512_movepi8_mask(d);
      one[j] = _mm512_test_epi8_mask(m, _mm512_set1_epi8(1));
      two[j] = _mm512_test_epi8_mask(m, _mm512_set1_epi8(2));
    }
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const __m512i c = _mm512_sub_epi8(codes(g), _mm512_set1_epi8(32));
      const __m512i c2 = _mm512_add_epi8(c, c);
#pragma GCC unroll 3
      for (int j = 0; j < kPlanes; ++j) {
        __m512i v = _mm512_maskz_mov_epi8(one[j], c);
        v = _mm512_mask_add_epi8(v, two[j], v, c2);
        v = _mm512_mask_sub_epi8(v, neg[j], _mm512_setzero_si512(), v);
        _mm512_store_si512(a + kOffPlanes + kPlaneBytes * j + 256 * k + 64 * g, v);
      }
    }
  }

  // A panel block (prep's layout) at v into an AMX panel block at a.
  static void to_planes(const uint8_t* v, uint8_t* a) {
    _mm512_store_si512(a, load_si(v));
    for (int k = 0; k < 16; ++k)
      store_planes(
          load_si(v + kOffSc + 64 * k), k,
          [&](int g) { return load_si(v + kOffCodes + 256 * k + 64 * g); }, a);
  }

  static void prep_packed_amx(const uint8_t* packed, int64_t nb, uint8_t* panel, NextRows& next,
                              int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      next.upto(b, nb);
      const uint8_t* pk = packed + size_t(b) * size_t(quant::kPackedQ6KBlockBytes);
      uint8_t* a = panel + size_t(b) * kAmxPanelBytes;
      store_f16x16(pk, a);
      alignas(64) int32_t sc_lanes[16][kRows];
      __m512i scp[8];
      widen_scales(pk, sc_lanes, scp);
      for (int k = 0; k < 16; ++k)
        store_planes(
            _mm512_load_si512(sc_lanes[k]), k, [&](int g) { return widen_codes(pk, k, g); }, a);
    }
  }

  static void block_products(const uint8_t* act, const uint8_t* p, int32_t (*sums)[256]) {
    amx_block_sums256x3(act, 256, p + kOffPlanes, kPlaneBytes, sums);
  }
  [[gnu::always_inline]] static void block_float_steps(__m512 acc[16], const int32_t (*sums)[256],
                                                       const uint8_t* p, const uint8_t* act) {
    const __m512 dw = load_ps(p);
    const auto* da = reinterpret_cast<const float*>(act + kAmxQ8KActScalesAt);
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      // S0 + 7 (S1 + 7 S2), by shifts: 7 x = 8 x - x.
      const __m512i s2 = _mm512_load_si512(sums[2] + 16 * j);
      const __m512i t = _mm512_add_epi32(_mm512_load_si512(sums[1] + 16 * j),
                                         _mm512_sub_epi32(_mm512_slli_epi32(s2, 3), s2));
      const __m512i isum = _mm512_add_epi32(_mm512_load_si512(sums[0] + 16 * j),
                                            _mm512_sub_epi32(_mm512_slli_epi32(t, 3), t));
      acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(da[j])), _mm512_cvtepi32_ps(isum),
                               acc[j]);
    }
  }

  // kPacked: a prepacked panel instead of this call's own, widened here per block.
  template <int TT, bool kPacked = false>
  static void tile(const uint8_t* panel, int64_t nb, const TileArgs<TT>& args,
                   NextRows* next = nullptr) {
    constexpr size_t kStride = kPacked ? size_t(quant::kPackedQ6KBlockBytes) : size_t(kPanelBytes);
    __m512 acc[TT];
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      if (next) next->upto(b, nb);
      const uint8_t* p = panel + size_t(b) * kStride;
      alignas(64) int32_t sc_lanes[16][kRows];
      __m512i scp[8];
      if constexpr (kPacked) {
        widen_scales(p, sc_lanes, scp);
      } else {
        for (int k = 0; k < 8; ++k) scp[k] = load_si(p + kOffScp + 64 * k);
      }
      const BlockQ8K* a[TT];
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) a[j] = reinterpret_cast<const BlockQ8K*>(args.acts[j]) + b;
      __m512i isum[TT];
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) isum[j] = _mm512_setzero_si512();
        // Sub-block k = 16 elements = groups 4 (k % 2) .. +3 of slice k / 2.
#pragma GCC unroll 1
      for (int k = 0; k < 16; ++k) {
        const uint8_t* codes = p + kOffCodes + 256 * k;
        __m512i t[TT];
#pragma GCC unroll 16
        for (int j = 0; j < TT; ++j) t[j] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) {
          const __m512i w = kPacked ? widen_codes(p, k, g) : load_si(codes + 64 * g);
#pragma GCC unroll 16
          for (int j = 0; j < TT; ++j) t[j] = dpbusd_bcast4(t[j], w, a[j]->qs + 16 * k + 4 * g);
        }
        const __m512i sc = kPacked ? _mm512_load_si512(sc_lanes[k]) : load_si(p + kOffSc + 64 * k);
#pragma GCC unroll 16
        for (int j = 0; j < TT; ++j)
          isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(t[j], sc));
      }
      const __m512 dw =
          kPacked ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))
                  : load_ps(p);
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) {
        // The -32 code offset: 32 Σ_k sc_k bsum_k, bsums paired per madd.
        __m512i off = _mm512_madd_epi16(scp[0], bcast4_512(&a[j]->bsums[0]));
#pragma GCC unroll 8
        for (int k = 1; k < 8; ++k)  // VPDPWSSD: madd + add in one (the same integers)
          off = dpwssd_bcast4(off, scp[k], &a[j]->bsums[2 * k]);
        const __m512i s = _mm512_sub_epi32(isum[j], _mm512_slli_epi32(off, 5));
        const __m512 da = _mm512_set1_ps(a[j]->d);
        acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(s), acc[j]);
      }
    }
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) _mm512_storeu_ps(args.ys[j], acc[j]);
  }
};

}  // namespace

QuantTileFn quant_tile_q6k_avx512(bool packed) {
  return packed ? rows_packed16_gemv<PackedK<Q6K>, gemv_packed_q6_k> : rows_panels16<Q6K>;
}

}  // namespace fak::kernels
