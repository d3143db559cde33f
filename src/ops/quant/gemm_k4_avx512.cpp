// AVX-512 prefill tiles of q4_K and q5_K (against Q8_K activations), on rows as stored and packed
// at load: VNNI panel tiles (gemm_avx512.cpp's scheme: 16 weight rows in the 16 int32 lanes,
// vpdpbusd, an integer multiply by each sub-block's scale) and, where the CPU has AMX-INT8, tiles
// whose panels hold the codes times the sub-block scales in planes of one scale digit each, so the
// tile unit's products give the sub-blocks' scaled sums with no vector step per sub-block. Both
// make the integers vec_dot makes, and per block the same float steps in the same order: the same
// bits (matmul_quant_test).
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

// q4_K / q5_K panel block: d[16], dmin[16] (floats), sc[8 sub-blocks] (lane i: scale of row i as
// int32), mp[4] (lane i: the int16 pair (m_2k, m_2k+1) of row i), then 8 x 8 registers of codes
// (sub-block s, group g: codes 4g..4g+3 of sub-block s of row i in lane i).
template <bool kFiveBit>
struct K4 : AmxPlanes<K4<kFiveBit>> {
  static constexpr QuantType kType = kFiveBit ? QuantType::Q5_K : QuantType::Q4_K;
  using Block = std::conditional_t<kFiveBit, BlockQ5K, BlockQ4K>;
  static constexpr int kBlock = kQKK;
  static constexpr int kOffSc = 128, kOffMp = kOffSc + 8 * 64, kOffCodes = kOffMp + 4 * 64;
  static constexpr int kPanelBytes = kOffCodes + 64 * 64;
  static constexpr int kTT = 6;

  // Sub-blocks 2c (low nibbles) and 2c + 1 (high nibbles) of one row, as bytes.
  static void codes(const Block& blk, int c, __m256i& lo, __m256i& hi) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i q4 = load256(blk.qs + 32 * c);
    lo = _mm256_and_si256(q4, m4);
    hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
    if constexpr (kFiveBit) {
      const __m256i hb = _mm256_srli_epi16(load256(blk.qh), 2 * c);
      lo = _mm256_add_epi8(lo, _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(1)), 4));
      hi = _mm256_add_epi8(hi, _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(2)), 3));
    }
  }

  // Block b of 16 rows into a panel block at p.
  static void prep_block(const uint8_t* const* rows, int64_t b, uint8_t* p) {
    const Block* blk[kRows];
    for (int i = 0; i < kRows; ++i) blk[i] = reinterpret_cast<const Block*>(rows[i]) + b;
    store_scales16(rows, size_t(b) * sizeof(Block), p);
    store_scales16(rows, size_t(b) * sizeof(Block) + 2, p + 64);
    uint8_t sc[kRows][8], m[kRows][8];
    for (int i = 0; i < kRows; ++i) unpack_scales_k4(blk[i]->scales, sc[i], m[i]);
    auto* sc32 = reinterpret_cast<int32_t*>(p + kOffSc);
    auto* mp32 = reinterpret_cast<uint32_t*>(p + kOffMp);
    for (int s = 0; s < 8; ++s)
      for (int i = 0; i < kRows; ++i) sc32[kRows * s + i] = sc[i][s];
    for (int k = 0; k < 4; ++k)
      for (int i = 0; i < kRows; ++i)
        mp32[kRows * k + i] = m[i][2 * k] | uint32_t(m[i][2 * k + 1]) << 16;
    for (int c = 0; c < 4; ++c) {
      __m256i lo[2][8], hi[2][8];
      for (int i = 0; i < kRows; ++i) codes(*blk[i], c, lo[i / 8][i % 8], hi[i / 8][i % 8]);
      store_transposed16(lo[0], lo[1], p + kOffCodes + (2 * c) * 512);
      store_transposed16(hi[0], hi[1], p + kOffCodes + (2 * c + 1) * 512);
    }
  }

  static void prep(const uint8_t* const* rows, int64_t nb, uint8_t* panel, NextRows& next) {
    for (int64_t b = 0; b < nb; ++b) {
      next.upto(b, nb);
      prep_block(rows, b, panel + size_t(b) * kPanelBytes);
    }
  }

  // A packed block's scales (quant::kPackedQ4K*), per lane: sub-block scales sc_s as int32 and
  // the min pairs (m_2k, m_2k+1) as int16 pairs, as prep stores them; scales_mins_k4's word steps
  // on all 16 lanes at once.
  static void widen_scales(const uint8_t* p, int32_t (*sc_lanes)[kRows], __m512i* mp) {
    const K4ScaleBytes s = k4_scale_bytes(p);
    const __m512i byte = _mm512_set1_epi32(0xff);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      _mm512_store_si512(sc_lanes[k], _mm512_and_si512(_mm512_srli_epi32(s.sc_lo, 8 * k), byte));
      _mm512_store_si512(sc_lanes[4 + k],
                         _mm512_and_si512(_mm512_srli_epi32(s.sc_hi, 8 * k), byte));
    }
#pragma GCC unroll 2
    for (int k = 0; k < 2; ++k) {
      mp[k] = byte_pair_i16(s.m_lo, k);
      mp[2 + k] = byte_pair_i16(s.m_hi, k);
    }
  }

  // Codes 4g..4g+3 of sub-block s of a packed block, as the register prep stores: sub-blocks 2c
  // and 2c + 1 are the low and high nibbles of the same bytes, and (q5_K) bit s of each qh byte
  // is the code's fifth bit.
  static __m512i widen_codes(const uint8_t* p, int s, int g) {
    constexpr int kCodes = kFiveBit ? quant::kPackedQ5KCodesOffset : quant::kPackedQ4KCodesOffset;
    const __m512i raw = _mm512_loadu_si512(p + kCodes + 512 * (s / 2) + 64 * g);
    __m512i w = _mm512_and_si512(s % 2 ? _mm512_srli_epi16(raw, 4) : raw, _mm512_set1_epi8(0x0F));
    if constexpr (kFiveBit) {
      const __m512i qh = _mm512_loadu_si512(p + quant::kPackedQ5KHighOffset + 64 * g);
      w = _mm512_or_si512(
          w, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, s), _mm512_set1_epi8(1)), 4));
    }
    return w;
  }

  // This call's own panel (prep's layout) from packed blocks: the same values prep makes from
  // the rows, for calls of many tokens, which would otherwise widen the packed blocks per tile.
  static constexpr size_t kPackedBytes =
      kFiveBit ? size_t(quant::kPackedQ5KBlockBytes) : size_t(quant::kPackedQ4KBlockBytes);
  // The packed block at pk into a panel block at p.
  static void prep_packed_block(const uint8_t* pk, uint8_t* p) {
    store_f16x16(pk, p);
    store_f16x16(pk + 32, p + 64);
    auto* sc_lanes = reinterpret_cast<int32_t(*)[kRows]>(p + kOffSc);
    __m512i mp[4];
    widen_scales(pk, sc_lanes, mp);
    for (int k = 0; k < 4; ++k) _mm512_store_si512(p + kOffMp + 64 * k, mp[k]);
    for (int sb = 0; sb < 8; ++sb)
      for (int g = 0; g < 8; ++g)
        _mm512_store_si512(p + kOffCodes + 512 * sb + 64 * g, widen_codes(pk, sb, g));
  }

  static void prep_packed(const uint8_t* packed, int64_t nb, uint8_t* panel, NextRows& next) {
    for (int64_t b = 0; b < nb; ++b) {
      next.upto(b, nb);
      prep_packed_block(packed + size_t(b) * kPackedBytes, panel + size_t(b) * kPanelBytes);
    }
  }

  // The AMX panel: a panel block's scales (d, dmin, mp as above; sc's lines unused), then its
  // codes times the
  // sub-block scale in two planes, one digit of the scale in base 8 each: plane j holds
  // code x ((sc >> 3j) & 7), at most 31 x 7 = 217, a byte. A tile product per plane over the
  // whole 256 elements then gives sums0 + 8 sums1 = Σ_s sc_s t_s, the integer the VNNI tiles make
  // with a multiply per sub-block (exact either way), with the tile unit at its full 64-byte
  // depth and no per-sub-block steps on the vector units.
  static constexpr int kOffPlanes = kOffCodes, kPlaneBytes = 64 * 64;
  static constexpr int kAmxPanelBytes = kOffPlanes + 2 * kPlaneBytes;

  // Byte 16 d + c: c x d for d in [d0, d0 + 4), c in 0..15 (product tables of q4_K's planes).
  static __m512i product_table(int d0) {
    alignas(64) uint8_t t[64];
    for (int i = 0; i < 64; ++i) t[i] = uint8_t((d0 + i / 16) * (i % 16));
    return _mm512_load_si512(t);
  }

  // Sub-block sb's codes, register by register (codes(g): g = 0..7, as the panel's), into the
  // planes of an AMX panel block at a, for the scales sc (each lane's as an int32, 0..63):
  // code x digit by masked byte adds of the code, twice and four times it (no byte multiply).
  // (VBMI's byte permute: the planes are made only for AMX tiles, and every CPU with AMX has it.)
  template <class Codes>
  [[gnu::always_inline, gnu::target("avx512vbmi")]] static void store_planes(__m512i sc_lanes,
                                                                             int sb, Codes codes,
                                                                             uint8_t* a) {
    // Byte 0 of each dword into all four: each lane's scale in every byte of its codes.
    const __m512i spread =
        _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12));
    const __m512i sc = _mm512_shuffle_epi8(sc_lanes, spread);
    if constexpr (!kFiveBit) {
      // q4_K's codes are 0..15: code x digit is entry 16 digit + code of a 128-byte table, one
      // two-register byte permute per plane.
      const __m512i t_lo = product_table(0), t_hi = product_table(4);
      const __m512i hi0 = _mm512_slli_epi16(_mm512_and_si512(sc, _mm512_set1_epi8(7)), 4);
      const __m512i hi1 = _mm512_and_si512(_mm512_slli_epi16(sc, 1), _mm512_set1_epi8(0x70));
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        const __m512i c = codes(g);
        _mm512_store_si512(a + kOffPlanes + 512 * sb + 64 * g,
                           _mm512_permutex2var_epi8(t_lo, _mm512_or_si512(c, hi0), t_hi));
        _mm512_store_si512(a + kOffPlanes + kPlaneBytes + 512 * sb + 64 * g,
                           _mm512_permutex2var_epi8(t_lo, _mm512_or_si512(c, hi1), t_hi));
      }
      return;
    }
    __mmask64 bit[6];
#pragma GCC unroll 6
    for (int i = 0; i < 6; ++i) bit[i] = _mm512_test_epi8_mask(sc, _mm512_set1_epi8(char(1 << i)));
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      const __m512i c = codes(g);
      const __m512i c2 = _mm512_add_epi8(c, c), c4 = _mm512_add_epi8(c2, c2);
      __m512i p0 = _mm512_maskz_mov_epi8(bit[0], c);
      p0 = _mm512_mask_add_epi8(p0, bit[1], p0, c2);
      p0 = _mm512_mask_add_epi8(p0, bit[2], p0, c4);
      __m512i p1 = _mm512_maskz_mov_epi8(bit[3], c);
      p1 = _mm512_mask_add_epi8(p1, bit[4], p1, c2);
      p1 = _mm512_mask_add_epi8(p1, bit[5], p1, c4);
      _mm512_store_si512(a + kOffPlanes + 512 * sb + 64 * g, p0);
      _mm512_store_si512(a + kOffPlanes + kPlaneBytes + 512 * sb + 64 * g, p1);
    }
  }

  // A panel block (prep's layout) at v into an AMX panel block at a.
  [[gnu::target("avx512vbmi")]] static void to_planes(const uint8_t* v, uint8_t* a) {
#pragma GCC unroll 14
    for (int l = 0; l < kOffCodes / 64; ++l) _mm512_store_si512(a + 64 * l, load_si(v + 64 * l));
    for (int sb = 0; sb < 8; ++sb)
      store_planes(
          load_si(v + kOffSc + 64 * sb), sb,
          [&](int g) { return load_si(v + kOffCodes + 512 * sb + 64 * g); }, a);
  }

  // From packed blocks straight into the planes (prep_packed_block's steps, codes never stored).
  [[gnu::target("avx512vbmi")]] static void prep_packed_amx(const uint8_t* packed, int64_t nb,
                                                            uint8_t* panel, NextRows& next,
                                                            int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      next.upto(b, nb);
      const uint8_t* pk = packed + size_t(b) * kPackedBytes;
      uint8_t* a = panel + size_t(b) * kAmxPanelBytes;
      store_f16x16(pk, a);
      store_f16x16(pk + 32, a + 64);
      alignas(64) int32_t sc_lanes[8][kRows];
      __m512i mp[4];
      widen_scales(pk, sc_lanes, mp);
      for (int k = 0; k < 4; ++k) _mm512_store_si512(a + kOffMp + 64 * k, mp[k]);
      for (int sb = 0; sb < 8; ++sb)
        store_planes(
            _mm512_load_si512(sc_lanes[sb]), sb, [&](int g) { return widen_codes(pk, sb, g); }, a);
    }
  }

  // kPacked: a prepacked panel (quant::kPackedQ4K* / kPackedQ5K*) instead of this call's own: the
  // scales and mins are unpacked from each row's 12 bytes and the codes rebuilt here, per block.
  template <int TT, bool kPacked = false>
  static void tile(const uint8_t* panel, int64_t nb, const TileArgs<TT>& args,
                   NextRows* next = nullptr) {
    constexpr size_t kStride = kPacked ? kPackedBytes : size_t(kPanelBytes);
    __m512 acc[TT];
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      if (next) next->upto(b, nb);
      const uint8_t* p = panel + size_t(b) * kStride;
      // Per lane (row): sub-block scales sc_s as int32, and the min pairs (m_2k, m_2k+1) as int16
      // pairs, as prep stores them; from the packed 12 bytes with scales_mins_k4's word steps.
      alignas(64) int32_t sc_lanes[8][kRows];
      __m512i mp[4];
      if constexpr (kPacked) {
        widen_scales(p, sc_lanes, mp);
      } else {
        for (int k = 0; k < 4; ++k) mp[k] = load_si(p + kOffMp + 64 * k);
      }
      const BlockQ8K* a[TT];
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) a[j] = reinterpret_cast<const BlockQ8K*>(args.acts[j]) + b;
      // Sub-block s's sums of codes x activations, t_s (8 VPDPBUSD a token).
      const auto sub_block_sums = [&](int s, __m512i(&t)[TT]) {
        const uint8_t* codes = p + kOffCodes + 512 * s;  // a call's own panel (packed: widen_codes)
#pragma GCC unroll 16
        for (int j = 0; j < TT; ++j) t[j] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) {
          __m512i w;
          if constexpr (kPacked) {
            w = widen_codes(p, s, g);
          } else {
            w = load_si(codes + 64 * g);
          }
#pragma GCC unroll 16
          for (int j = 0; j < TT; ++j) t[j] = dpbusd_bcast4(t[j], w, a[j]->qs + 32 * s + 4 * g);
        }
      };
      const auto scales = [&](int s) {
        return kPacked ? _mm512_load_si512(sc_lanes[s]) : load_si(p + kOffSc + 64 * s);
      };
      // float(Σ_s sc_s t_s) for each token, the integer sum's own float (as vec_dot rounds it).
      __m512 fsum[TT];
      if constexpr (kFiveBit) {
        __m512i isum[TT];
#pragma GCC unroll 16
        for (int j = 0; j < TT; ++j) isum[j] = _mm512_setzero_si512();
#pragma GCC unroll 1
        for (int s = 0; s < 8; ++s) {
          __m512i t[TT];
          sub_block_sums(s, t);
          const __m512i sc = scales(s);
#pragma GCC unroll 16
          for (int j = 0; j < TT; ++j)
            isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(t[j], sc));
        }
#pragma GCC unroll 16
        for (int j = 0; j < TT; ++j) fsum[j] = _mm512_cvtepi32_ps(isum[j]);
      } else {
        // q4_K: each sc_s t_s is an integer under 2^22 (|t_s| <= 32 x 15 x 127, sc_s <= 63) and
        // four of them under 2^24, so two float sums of four sub-blocks each are exact, and
        // their sum is the exact integer rounded once: float(Σ), as cvtepi32_ps gives it. A
        // convert and an FMA a sub-block and token where VPMULLD (two uops) and an add were.
        __m512 half[2][TT];
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 16
          for (int j = 0; j < TT; ++j) half[h][j] = _mm512_setzero_ps();
#pragma GCC unroll 1
          for (int s = 4 * h; s < 4 * h + 4; ++s) {
            __m512i t[TT];
            sub_block_sums(s, t);
            const __m512 sc = _mm512_cvtepi32_ps(scales(s));
#pragma GCC unroll 16
            for (int j = 0; j < TT; ++j)
              half[h][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t[j]), sc, half[h][j]);
          }
        }
#pragma GCC unroll 16
        for (int j = 0; j < TT; ++j) fsum[j] = _mm512_add_ps(half[0][j], half[1][j]);
      }
      // The fp16 scales widen exactly: the same floats as a panel that stores them widened.
      const __m512 dw =
          kPacked ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))
                  : load_ps(p);
      const __m512 dmw =
          kPacked ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)))
                  : load_ps(p + 64);
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) acc[j] = add_token(acc[j], fsum[j], *a[j], mp, dw, dmw);
    }
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) _mm512_storeu_ps(args.ys[j], acc[j]);
  }

  // One token's float steps for a block from its integer sum Σ_s sc_s t_s (as a float, fsum): the
  // mins term Σ_k m_k sums32_k from the activation block's 32-element sums, paired per VPDPWSSD
  // (each pair the instruction's own broadcast operand), then acc + (d_w d_a) fsum - (dmin_w d_a)
  // imin.
  [[gnu::always_inline]] static __m512 add_token(__m512 acc, __m512 fsum, const BlockQ8K& a,
                                                 const __m512i mp[4], __m512 dw, __m512 dmw) {
    __m512i imin = _mm512_madd_epi16(mp[0], bcast4_512(&a.sums32[0]));
#pragma GCC unroll 4
    for (int k = 1; k < 4; ++k) imin = dpwssd_bcast4(imin, mp[k], &a.sums32[2 * k]);
    float d;
    std::memcpy(&d, &a.d, 4);
    return float_steps(acc, fsum, imin, d, dw, dmw);
  }
  [[gnu::always_inline]] static __m512 float_steps(__m512 acc, __m512 fsum, __m512i imin, float d,
                                                   __m512 dw, __m512 dmw) {
    const __m512 da = _mm512_set1_ps(d);
    acc = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), fsum, acc);
    return _mm512_fnmadd_ps(_mm512_mul_ps(dmw, da), _mm512_cvtepi32_ps(imin), acc);
  }

  // add_token with the sub-block sum pairs as the AMX activation tiles keep them
  // (kAmxQ8KActBlockBytes): the same integers.
  [[gnu::always_inline]] static __m512 add_token_pairs(__m512 acc, __m512i isum,
                                                       const int32_t* pairs, float d,
                                                       const __m512i mp[4], __m512 dw, __m512 dmw) {
    __m512i imin = _mm512_madd_epi16(mp[0], _mm512_set1_epi32(pairs[0]));
#pragma GCC unroll 4
    for (int k = 1; k < 4; ++k)
      imin = _mm512_dpwssd_epi32(imin, mp[k], _mm512_set1_epi32(pairs[k]));
    return float_steps(acc, _mm512_cvtepi32_ps(isum), imin, d, dw, dmw);
  }

  // AMX (amx_planes_pass below): per block the planes' tile products, then per token
  // Σ_s sc_s t_s = sums0 + 8 sums1 and the float steps, as the VNNI tiles'.
  static constexpr int kPlanes = 2;
  static void block_products(const uint8_t* act, const uint8_t* p, int32_t (*sums)[256]) {
    amx_block_sums256x2(act, 256, p + kOffPlanes, p + kOffPlanes + kPlaneBytes, sums[0], sums[1]);
  }
  [[gnu::always_inline]] static void block_float_steps(__m512 acc[16], const int32_t (*sums)[256],
                                                       const uint8_t* p, const uint8_t* act) {
    __m512i mp[4];
    for (int k = 0; k < 4; ++k) mp[k] = load_si(p + kOffMp + 64 * k);
    const __m512 dw = load_ps(p), dmw = load_ps(p + 64);
    const auto* da = reinterpret_cast<const float*>(act + kAmxQ8KActScalesAt);
    const auto* pairs = reinterpret_cast<const int32_t*>(act + kAmxQ8KActPairsAt);
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      const __m512i isum =
          _mm512_add_epi32(_mm512_load_si512(sums[0] + 16 * j),
                           _mm512_slli_epi32(_mm512_load_si512(sums[1] + 16 * j), 3));
      acc[j] = add_token_pairs(acc[j], isum, pairs + 4 * j, da[j], mp, dw, dmw);
    }
  }
};

}  // namespace

QuantTileFn quant_tile_k4_avx512(QuantType t) {
  switch (t) {
    case QuantType::Q4_K:
      return rows_panels16<K4<false>>;
    case QuantType::Q5_K:
      return rows_panels16<K4<true>>;
    default:
      return nullptr;
  }
}

QuantTileFn quant_tile_packed_k4_avx512(QuantType t) {
  switch (t) {
    case QuantType::Q4_K:
      return rows_packed16_gemv<PackedK<K4<false>>, gemv_packed_q4_k>;
    case QuantType::Q5_K:
      return rows_packed16<PackedK<K4<true>>>;
    default:
      return nullptr;
  }
}

}  // namespace fak::kernels
