// AVX-512 VNNI prefill kernels for q8_0, q4_0, q5_0, q4_1, q5_1 (against Q8_0 activations) and
// q4_K, q5_K, q6_K (against Q8_K): the AVX2 panel scheme (gemm_avx2.h) widened to 16 weight rows in
// the 16 int32 lanes, with vpdpbusd doing 4 code x activation products per lane and adding them
// into the lane in one instruction (AVX2 needs sign, maddubs, madd and add for the same work on 8
// rows). Over 600 lines on purpose: eight block types' panel kernels share one scheme and its
// helpers, and one file keeps them one ISA translation unit.
//
// vpdpbusd multiplies unsigned by signed bytes, so codes are stored unsigned: q4_0 / q5_0 / K-quant
// codes already are, q8_0 codes get +128, and the offset comes off once per block from the
// activation block sums (Σ (q + 128) a = Σ q a + 128 Σ a, exact in int32).
//
// note: bit-identical to the AVX2 tiles and to vec_dot (dot_ref.cpp's block-serial rule): the
// integer block sums are exact whatever instructions make them, and per block each lane does the
// same float steps in the same order, acc = fma(d_w * d_a, float(isum), acc) (then the mins term).
// So prefill on this kernel and decode on the AVX2 one agree bit for bit (matmul_quant_test).
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/avx512_warnings.h"  // first: before the intrinsics headers
#include "ops/quant/block_sums_amx.h"
#include "ops/quant/gemm_avx2.h"
#include "ops/quant/packed_lowbit_avx512.h"
#include "ops/quant/panels_avx512.h"
#include "ops/quant/rows_panels16_avx512.h"
#include "ops/scratch.h"
#include "quant/packed_blocks.h"
#include "quant/quant_blocks.h"

namespace fak::kernels {

namespace {

using namespace fak::quant;

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
// 16 fp16 values at src stored widened as 16 floats at dst (64-byte aligned): a packed block's
// scales into a call's own panel.
inline void store_f16x16(const uint8_t* src, uint8_t* dst) {
  _mm512_store_ps(reinterpret_cast<float*>(dst),
                  _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src))));
}

// q8_0 / q4_0 / q5_0 / q4_1 / q5_1 panel block: 16 float scales (and for q4_1 / q5_1 the 16
// float mins), then 8 registers of unsigned codes (register g: codes 4g..4g+3 of row i in lane i).
// MXFP4: its doubled E2M1 codes + 12, unsigned, and the E8M0 scales widened. IQ4_NL: its grid
// values + 128, as q8_0's codes (never packed at load: no packed layout is defined for it).
template <WType T>
struct Block32 {
  static constexpr QuantType kType = T == WType::Q8_0     ? QuantType::Q8_0
                                     : T == WType::Q4_0   ? QuantType::Q4_0
                                     : T == WType::Q5_0   ? QuantType::Q5_0
                                     : T == WType::Q4_1   ? QuantType::Q4_1
                                     : T == WType::MXFP4  ? QuantType::MXFP4
                                     : T == WType::IQ4_NL ? QuantType::IQ4_NL
                                                          : QuantType::Q5_1;
  static constexpr bool kMx = T == WType::MXFP4;
  static constexpr bool kMin = T == WType::Q4_1 || T == WType::Q5_1;  // x = d q + m
  static constexpr bool kFiveBit = T == WType::Q5_0 || T == WType::Q5_1;
  static constexpr int kBlock = kQK;
  static constexpr int kCodesAt = kMin ? 128 : 64;
  static constexpr int kPanelBytes = kCodesAt + 8 * 64;
  static constexpr int kTT = 8;
  static constexpr int kOffset = kMin                                     ? 0
                                 : T == WType::Q8_0 || T == WType::IQ4_NL ? 128
                                 : T == WType::Q4_0                       ? 8
                                 : T == WType::MXFP4                      ? 12
                                                                          : 16;
  // The layout packed at load (quant_blocks.h: kPackedQ8* for q8_0, kPackedMxfp4* for MXFP4,
  // packed32_* for the others).
  static constexpr int kPackedBytes = T == WType::Q8_0 ? quant::kPackedQ8BlockBytes
                                      : kMx            ? quant::kPackedMxfp4BlockBytes
                                            : quant::packed32_block_bytes(kMin, kFiveBit);
  static constexpr int kPackedCodes = T == WType::Q8_0 ? quant::kPackedQ8CodesOffset
                                      : kMx            ? quant::kPackedMxfp4CodesOffset
                                            : quant::packed32_codes_offset(kMin, kFiveBit);
  static constexpr int kPackedHigh = quant::packed32_high_offset(kMin);
  using Block = std::conditional_t<
      T == WType::Q8_0, BlockQ8_0,
      std::conditional_t<
          T == WType::Q4_0, BlockQ4_0,
          std::conditional_t<
              T == WType::Q5_0, BlockQ5_0,
              std::conditional_t<T == WType::Q4_1, BlockQ4_1,
                                 std::conditional_t<kMx, BlockMxfp4,
                                                    std::conditional_t<T == WType::IQ4_NL,
                                                                       BlockIq4Nl, BlockQ5_1>>>>>>;

  // q8_0's and iq4_nl's panels (a call's own, and q8_0's packed at load) hold their codes as
  // signed bytes (q8_0's as the file does, iq4_nl's grid values): the AMX tile multiplies them
  // signed by signed (TDPBSSD), so its sums need no offset taken off, and the VNNI tiles, whose
  // VPDPBUSD wants unsigned codes, flip each register's sign bits (vnni_codes: the code + 128,
  // then 128 Σ a off as before).
  static constexpr bool kSignedCodes = T == WType::Q8_0 || T == WType::IQ4_NL;
  static __m512i vnni_codes(__m512i panel_codes) {
    if constexpr (kSignedCodes) return _mm512_xor_si512(panel_codes, _mm512_set1_epi8(-128));
    return panel_codes;
  }

  static __m256i codes(const uint8_t* row, int64_t i) {
    const Block& b = reinterpret_cast<const Block*>(row)[i];
    if constexpr (T == WType::Q8_0) {
      return load256(b.qs);
    } else if constexpr (T == WType::IQ4_NL) {
      return codes_iq4(b.qs);  // the signed grid values
    } else if constexpr (kMx) {
      return codes_mxfp4_unsigned(b.qs);
    } else if constexpr (kFiveBit) {
      return _mm256_or_si256(unpack_nibbles(b.qs),
                             _mm256_and_si256(bits_to_bytes(b.qh), _mm256_set1_epi8(0x10)));
    } else {
      return unpack_nibbles(b.qs);
    }
  }

  static void prep(const uint8_t* const* rows, int64_t nb, uint8_t* panel, NextRows& next) {
    for (int64_t b = 0; b < nb; ++b) {
      next.upto(b, nb);
      uint8_t* p = panel + size_t(b) * kPanelBytes;
      if constexpr (kMx) {
        _mm256_store_ps(reinterpret_cast<float*>(p),
                        gather_e8m0_half_x8(rows, size_t(b) * sizeof(Block)));
        _mm256_store_ps(reinterpret_cast<float*>(p + 32),
                        gather_e8m0_half_x8(rows + 8, size_t(b) * sizeof(Block)));
      } else {
        store_scales16(rows, size_t(b) * sizeof(Block), p);
      }
      if constexpr (kMin) store_scales16(rows, size_t(b) * sizeof(Block) + 2, p + 64);
      __m256i lo[8], hi[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        lo[i] = codes(rows[i], b);
        hi[i] = codes(rows[8 + i], b);
      }
      store_transposed16(lo, hi, p + kCodesAt);
    }
  }

  // Register g of a packed block, as prep stores it: codes 4g..4g+3 of row i in lane i. q8_0's are
  // stored so; the nibble types' are split from their bytes here (register g < 4: the low
  // nibbles of dword g, else the high ones of dword g - 4), and the q5 types' fifth bits, stored
  // reordered (quant::q5_high_bits_packed), come into bit 4 of each byte with one shift.
  static __m512i packed_codes(const uint8_t* p, int g) {
    if constexpr (T == WType::Q8_0) {
      return _mm512_loadu_si512(p + kPackedCodes + 64 * g);
    } else {
      const __m512i raw = _mm512_loadu_si512(p + kPackedCodes + 64 * (g % 4));
      __m512i w = _mm512_and_si512(g < 4 ? raw : _mm512_srli_epi16(raw, 4), _mm512_set1_epi8(0x0F));
      if constexpr (kFiveBit) {
        const __m512i h = _mm512_loadu_si512(p + kPackedHigh);
        const __m512i at4 =
            g <= 4 ? _mm512_slli_epi32(h, unsigned(4 - g)) : _mm512_srli_epi32(h, unsigned(g - 4));
        w = _mm512_or_si512(w, _mm512_and_si512(at4, _mm512_set1_epi8(0x10)));
      }
      if constexpr (kMx) w = mxfp4_unsigned_512(w);
      if constexpr (T == WType::IQ4_NL) w = _mm512_shuffle_epi8(iq4_grid_signed_512(), w);
      return w;
    }
  }

  // This call's own panel (prep's layout) from packed blocks, for calls of many tokens (as
  // K4::prep_packed).
  static void prep_packed(const uint8_t* packed, int64_t nb, uint8_t* panel, NextRows& next) {
    for (int64_t b = 0; b < nb; ++b) {
      next.upto(b, nb);
      const uint8_t* pk = packed + size_t(b) * kPackedBytes;
      uint8_t* p = panel + size_t(b) * kPanelBytes;
      if constexpr (kMx)
        _mm512_store_ps(reinterpret_cast<float*>(p), e8m0_half_x16(pk));
      else
        store_f16x16(pk, p);
      if constexpr (kMin) store_f16x16(pk + quant::kPacked32MinsOffset, p + 64);
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) _mm512_store_si512(p + kCodesAt + 64 * g, packed_codes(pk, g));
    }
  }

  // The float steps of block b (at p) for TT tokens from their integer sums isum(j) (codes x
  // activations, the codes' offset not yet off) and their activation block's scale, code offset
  // correction (kOffset Σ a) and quant sum (Σ a, for the mins term), act(j) = {d_a, kOffset Σ a,
  // Σ a}: the VNNI and the AMX tiles go through the same steps, reading those from where each
  // keeps them.
  struct ActBlock {
    float d;
    int32_t offset_sum, sum;
  };
  // kNoOffset: the sums are the codes' own (the AMX tile's on signed codes).
  template <int TT, bool kPacked, class Sums, class Act, bool kNoOffset = false>
  [[gnu::always_inline]] static void add_block(__m512 acc[TT], Sums isum, Act act,
                                               const uint8_t* p) {
    // The fp16 (E8M0) scales widen exactly: the same floats as a panel that stores them widened.
    __m512 dw;
    if constexpr (kPacked && kMx)
      dw = e8m0_half_x16(p);
    else if constexpr (kPacked)
      dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    else
      dw = load_ps(p);
    __m512 mw = _mm512_setzero_ps();
    if constexpr (kMin)
      mw = kPacked ? _mm512_cvtph_ps(_mm256_loadu_si256(
                         reinterpret_cast<const __m256i*>(p + quant::kPacked32MinsOffset)))
                   : load_ps(p + 64);
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) {
      const ActBlock a = act(j);
      const __m512 da = _mm512_set1_ps(a.d);
      __m512i s = isum(j);
      if constexpr (kOffset != 0 && !kNoOffset)
        s = _mm512_sub_epi32(s, _mm512_set1_epi32(a.offset_sum));
      acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(s), acc[j]);
      if constexpr (kMin)  // + m Σ a: the min times the block's activation sum
        acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(mw, da), _mm512_set1_ps(float(a.sum)), acc[j]);
    }
  }

  // kPacked: a prepacked panel (Packed32 below) instead of this call's own.
  template <int TT, bool kPacked = false>
  static void tile(const uint8_t* panel, int64_t nb, const TileArgs<TT>& args,
                   NextRows* next = nullptr) {
    constexpr size_t kStride = kPacked ? size_t(kPackedBytes) : size_t(kPanelBytes);
    __m512 acc[TT];
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      if (next) next->upto(b, nb);
      const uint8_t* p = panel + size_t(b) * kStride;
      const size_t ab = size_t(b) * sizeof(BlockQ8_0) + 2;  // this block's activation quants
      __m512i isum[TT];
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) isum[j] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        const __m512i w = vnni_codes(kPacked ? packed_codes(p, g) : load_si(p + kCodesAt + 64 * g));
#pragma GCC unroll 16
        for (int j = 0; j < TT; ++j)
          isum[j] = _mm512_dpbusd_epi32(isum[j], w, bcast4_512(args.acts[j] + ab + 4 * g));
      }
      add_block<TT, kPacked>(
          acc, [&](int j) { return isum[j]; },
          [&](int j) {
            const int32_t sum = args.sums[j][b];
            return ActBlock{args.scales[j][b], kOffset * sum, sum};
          },
          p);
    }
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) _mm512_storeu_ps(args.ys[j], acc[j]);
  }

  // AMX: a tile of 16 tokens whose integer sums come from the tile unit (block_sums_amx.h), a
  // chunk of blocks at a time, then per block the tile's float steps. The codes must be in memory
  // as a VNNI panel: this call's own, or q8_0's packed one (the other packed types widen theirs in
  // the tile). Tokens [t, t + 16) (t a multiple of 16: their blocks in q.amx_acts), rows from r;
  // only the first n_valid tokens' outputs are stored (the rest are the padding's).
  static bool amx_ready(const QuantTask& q) {
    return q.amx_acts != nullptr;
  }
  template <bool kPacked>
  static void tile_amx16(const QuantTask& q, const uint8_t* panel, int64_t nb, int64_t r, int t,
                         int n_valid, bool stream) {
    static_assert(!kPacked || T == WType::Q8_0, "packed codes other than q8_0's widen in the tile");
    const uint8_t* acts = q.amx_acts + size_t(t / 16) * size_t(nb) * kAmxActBlockBytes;
    float* y = q.y + size_t(t) * size_t(q.w->rows) + size_t(r);
    const size_t y_stride = size_t(q.w->rows);
    constexpr size_t kStride = kPacked ? size_t(kPackedBytes) : size_t(kPanelBytes);
    constexpr size_t kCodes = kPacked ? size_t(kPackedCodes) : size_t(kCodesAt);
    // Blocks a chunk: 8 KB of sums, read back from L1. The tile unit makes chunk c + 1's sums while
    // the vector units do chunk c's float steps (issued in that order, so both are in flight).
    constexpr int kChunk = 8;
    alignas(64) int32_t sums[2][kChunk * 256];
    const int64_t chunks = (nb + kChunk - 1) / kChunk;
    const auto sums_of = [&](int64_t c) {
      const int64_t b0 = c * kChunk;
      amx_block_sums16<kSignedCodes>(acts + size_t(b0) * kAmxActBlockBytes, 32, kAmxActBlockBytes,
                                     panel + size_t(b0) * kStride + kCodes, kStride,
                                     int(nb - b0 < kChunk ? nb - b0 : kChunk), sums[c & 1]);
    };
    amx_configure_tiles();
    __m512 acc[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
    sums_of(0);
    for (int64_t c = 0; c < chunks; ++c) {
      if (c + 1 < chunks) sums_of(c + 1);
      const int64_t b0 = c * kChunk;
      const int n = int(nb - b0 < kChunk ? nb - b0 : kChunk);
      for (int i = 0; i < n; ++i) {
        const uint8_t* a = acts + size_t(b0 + i) * kAmxActBlockBytes;
        const auto* da = reinterpret_cast<const float*>(a + 512);
        // amx_act_tiles stored Σ a times kOffset (times 1 for the q4_1 / q5_1 mins).
        const auto* asum = reinterpret_cast<const int32_t*>(a + 576);
        // The first tile of a packed group reads it from memory: kPrefetchFar ahead into L2 (an
        // expert sees ~32 tokens, two tiles, so its weights' latency showed: pp512 GLM-4.5-Air
        // Q8_0 cut 341 / 326 / 289 -> 354 / 359 / 314 tok/s alternated; the whole next group
        // over the first tile instead, a little less; the 30B-A3B Q8_0 cut level).
        if (stream) prefetch_block<kStride, false>(panel + size_t(b0 + i) * kStride);
        const int32_t* s = sums[c & 1] + i * 256;
        const auto sums_j = [&](int j) { return _mm512_load_si512(s + 16 * j); };
        const auto act_j = [&](int j) { return ActBlock{da[j], asum[j], asum[j]}; };
        add_block<16, kPacked, decltype(sums_j), decltype(act_j), kSignedCodes>(
            acc, sums_j, act_j, panel + size_t(b0 + i) * kStride);
      }
    }
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j)
      if (j < n_valid) _mm512_storeu_ps(y + size_t(j) * y_stride, acc[j]);
  }
};

// q4_K / q5_K panel block: d[16], dmin[16] (floats), sc[8 sub-blocks] (lane i: scale of row i as
// int32), mp[4] (lane i: the int16 pair (m_2k, m_2k+1) of row i), then 8 x 8 registers of codes
// (sub-block s, group g: codes 4g..4g+3 of sub-block s of row i in lane i).
template <bool kFiveBit>
struct K4 {
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

  static void prep(const uint8_t* const* rows, int64_t nb, uint8_t* panel, NextRows& next) {
    for (int64_t b = 0; b < nb; ++b) {
      next.upto(b, nb);
      uint8_t* p = panel + size_t(b) * kPanelBytes;
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
  static void prep_packed(const uint8_t* packed, int64_t nb, uint8_t* panel, NextRows& next) {
    constexpr size_t kPackedBytes =
        kFiveBit ? size_t(quant::kPackedQ5KBlockBytes) : size_t(quant::kPackedQ4KBlockBytes);
    for (int64_t b = 0; b < nb; ++b) {
      next.upto(b, nb);
      const uint8_t* pk = packed + size_t(b) * kPackedBytes;
      uint8_t* p = panel + size_t(b) * kPanelBytes;
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
  }

  // kPacked: a prepacked panel (quant::kPackedQ4K* / kPackedQ5K*) instead of this call's own: the
  // scales and mins are unpacked from each row's 12 bytes and the codes rebuilt here, per block.
  template <int TT, bool kPacked = false>
  static void tile(const uint8_t* panel, int64_t nb, const TileArgs<TT>& args,
                   NextRows* next = nullptr) {
    constexpr size_t kPackedBytes =
        kFiveBit ? size_t(quant::kPackedQ5KBlockBytes) : size_t(quant::kPackedQ4KBlockBytes);
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
      __m512i isum[TT];
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) isum[j] = _mm512_setzero_si512();
#pragma GCC unroll 1
      for (int s = 0; s < 8; ++s) {
        const uint8_t* codes = p + kOffCodes + 512 * s;  // a call's own panel (packed: widen_codes)
        __m512i t[TT];
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
          for (int j = 0; j < TT; ++j)
            t[j] = _mm512_dpbusd_epi32(t[j], w, bcast4_512(a[j]->qs + 32 * s + 4 * g));
        }
        const __m512i sc = kPacked ? _mm512_load_si512(sc_lanes[s]) : load_si(p + kOffSc + 64 * s);
#pragma GCC unroll 16
        for (int j = 0; j < TT; ++j)
          isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(t[j], sc));
      }
      // The fp16 scales widen exactly: the same floats as a panel that stores them widened.
      const __m512 dw =
          kPacked ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))
                  : load_ps(p);
      const __m512 dmw =
          kPacked ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)))
                  : load_ps(p + 64);
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) acc[j] = add_token(acc[j], isum[j], *a[j], mp, dw, dmw);
    }
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) _mm512_storeu_ps(args.ys[j], acc[j]);
  }

  // One token's float steps for a block from its integer sum Σ_s sc_s t_s (isum): the mins term
  // Σ_k m_k (bsum_2k + bsum_2k+1) from the activation block's 16-element sums, paired per madd,
  // then acc + (d_w d_a) isum - (dmin_w d_a) imin.
  [[gnu::always_inline]] static __m512 add_token(__m512 acc, __m512i isum, const BlockQ8K& a,
                                                 const __m512i mp[4], __m512 dw, __m512 dmw) {
    int16_t s32[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      int16_t b0, b1;
      std::memcpy(&b0, &a.bsums[2 * k], 2);
      std::memcpy(&b1, &a.bsums[2 * k + 1], 2);
      s32[k] = int16_t(b0 + b1);
    }
    __m512i imin = _mm512_madd_epi16(mp[0], bcast4_512(&s32[0]));
#pragma GCC unroll 4
    for (int k = 1; k < 4; ++k)
      imin = _mm512_add_epi32(imin, _mm512_madd_epi16(mp[k], bcast4_512(&s32[2 * k])));
    float d;
    std::memcpy(&d, &a.d, 4);
    const __m512 da = _mm512_set1_ps(d);
    acc = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(isum), acc);
    return _mm512_fnmadd_ps(_mm512_mul_ps(dmw, da), _mm512_cvtepi32_ps(imin), acc);
  }

  // AMX (as Block32::tile_amx16): tokens [t, t + 16) of this call's own panel (the first n_valid
  // stored), rows from r. Each
  // sub-block's sums t_s for 16 tokens x 16 rows come from one tile instruction (A: the tokens'
  // 32 quants of the sub-block, read in place from their Q8_K rows; B: the panel's sub-block
  // codes); then per token the tile's integer steps Σ_s sc_s t_s and its float steps.
  static bool amx_ready(const QuantTask& q) {
    return q.n_tokens >= kAmxFewestTokens;
  }
  template <bool kPacked>
  static void tile_amx16(const QuantTask& q, const uint8_t* panel, int64_t nb, int64_t r, int t,
                         int n_valid, bool /*stream: own panels only*/) {
    static_assert(!kPacked, "packed q4_K / q5_K codes widen in the tile: AMX reads own panels");
    const uint8_t* act0 = q.act + size_t(t) * q.act_row_bytes;
    float* y = q.y + size_t(t) * size_t(q.w->rows) + size_t(r);
    alignas(64) int32_t sums[8 * 256];  // sub-block s, token j: 16 rows at 256 s + 16 j
    amx_configure_tiles();
    __m512 acc[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = panel + size_t(b) * kPanelBytes;
      const uint8_t* ab = act0 + size_t(b) * sizeof(BlockQ8K);
      amx_block_sums16(ab + offsetof(BlockQ8K, qs), q.act_row_bytes, 32, p + kOffCodes, 512, 8,
                       sums);
      __m512i mp[4];
      for (int k = 0; k < 4; ++k) mp[k] = load_si(p + kOffMp + 64 * k);
      const __m512 dw = load_ps(p), dmw = load_ps(p + 64);
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) {
        __m512i isum = _mm512_mullo_epi32(_mm512_load_si512(sums + 16 * j), load_si(p + kOffSc));
#pragma GCC unroll 7
        for (int sb = 1; sb < 8; ++sb)
          isum =
              _mm512_add_epi32(isum, _mm512_mullo_epi32(_mm512_load_si512(sums + 256 * sb + 16 * j),
                                                        load_si(p + kOffSc + 64 * sb)));
        acc[j] = add_token(acc[j], isum,
                           *reinterpret_cast<const BlockQ8K*>(ab + size_t(j) * q.act_row_bytes), mp,
                           dw, dmw);
      }
    }
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j)
      if (j < n_valid) _mm512_storeu_ps(y + size_t(j) * size_t(q.w->rows), acc[j]);
  }
};

// q6_K panel block: d[16], sc[16 sub-blocks] (lane i: scale of row i as int32), scp[8] (lane i:
// the int16 pair (sc_2k, sc_2k+1)), then 8 x 8 registers of codes in [0, 63] (32-element slice e,
// group g: codes 32e + 4g .. +3 of row i in lane i).
struct Q6K {
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

  static void prep(const uint8_t* const* rows, int64_t nb, uint8_t* panel, NextRows& next) {
    for (int64_t b = 0; b < nb; ++b) {
      next.upto(b, nb);
      uint8_t* p = panel + size_t(b) * kPanelBytes;
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
          for (int j = 0; j < TT; ++j)
            t[j] = _mm512_dpbusd_epi32(t[j], w, bcast4_512(a[j]->qs + 16 * k + 4 * g));
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
        for (int k = 1; k < 8; ++k)
          off = _mm512_add_epi32(off, _mm512_madd_epi16(scp[k], bcast4_512(&a[j]->bsums[2 * k])));
        const __m512i s = _mm512_sub_epi32(isum[j], _mm512_slli_epi32(off, 5));
        const __m512 da = _mm512_set1_ps(a[j]->d);
        acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(s), acc[j]);
      }
    }
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) _mm512_storeu_ps(args.ys[j], acc[j]);
  }
};

// Weights packed once, at load, into panels the tiles read in place of the rows (every type here:
// quant_blocks.h's kPacked* / packed32_*). Each keeps what a call's own panel widens (fp16 scales
// and mins, the K-quants' packed 6-bit scales, nibbles and high bits) as stored, so 16 rows' block
// is the bytes they took, and the tile widens it. Calls then skip the repack, which was most of a
// call of 2-16 tokens (perf, 8 sequences: 44% of the samples against 25% in the tiles). The
// families, each read by its F::tile<TT, true> (kWidensInTile: the tile rebuilds codes from the
// packed bytes, as all but q8_0's are):
template <WType T>
struct Packed32 {
  using F = Block32<T>;
  static constexpr int kBlock = kQK, kTT = F::kTT;
  static constexpr bool kWidensInTile = T != WType::Q8_0;
};
template <class Family>
struct PackedK {
  using F = Family;
  static constexpr int kBlock = kQKK, kTT = F::kTT;
  static constexpr bool kWidensInTile = true;
};

// Tokens [t, t + TT) of the group at row r, prefetching `next` over its blocks.
template <class P, int TT>
void packed_tile_at(const QuantTask& q, const uint8_t* panel, int64_t nb, int64_t r, int t,
                    NextRows* next) {
  P::F::template tile<TT, true>(panel, nb, tile_args<TT>(q, nb, r, t), next);
}

template <class P, int TT>
void packed_tile_remainder(const QuantTask& q, const uint8_t* panel, int64_t nb, int64_t r, int t,
                           int left, NextRows* next) {
  if constexpr (TT > 0) {
    if (left == TT) return packed_tile_at<P, TT>(q, panel, nb, r, t, next);
    return packed_tile_remainder<P, TT - 1>(q, panel, nb, r, t, left, next);
  }
}

// Rows [r0, r1) (whole groups of 16) of prepacked weights for every token: group r / 16's panels
// are where its rows were. The first tile of a group prefetches kPrefetchAhead ahead of the block
// it reads (it fetched the next group, as the repack for a call's own panels still does, which on
// wide rows is past L1 before it is read: two or four sequences decoding the Gemma-3-27B Q4_K_M
// cut, 34.8 / 34.4 -> 49.7 / 49.5 tok/s at two, 68.8 / 64.2 -> 73.8 / 82.7 at four; the Q8_0 and
// Qwen3-30B-A3B Q4_K_M cuts at four level; the repack for prefill kept its own: 4 KB ahead there
// took pp256 of the 30B Q4_K_M cut from 913-920 to 845-862).
//
// Nibble panels widen their codes in the tile, for every token tile again; past a few tiles that
// costs more than widening them once (matmul_quant_bench Q4_K_prefill128_packed: 12% slower than
// a call's own panels). So calls of more tokens widen each group once into a per-call panel
// (prep_packed) and tile that, as unpacked rows would.
template <class P>
void rows_packed16(const QuantTask& q, int64_t r0, int64_t r1) {
  const int64_t nb = q.w->cols / P::kBlock;
  const size_t group_bytes = size_t(kRows) * q.w->row_bytes;
  constexpr int kOwnPanelsFrom = 3 * P::kTT;  // tokens
  const bool amx = amx_enabled();
  if constexpr (P::kWidensInTile)
    if (q.n_tokens >= kOwnPanelsFrom)
      return tiles_over_panels16<typename P::F>(q, r0, r1,
                                                [&](int64_t r, uint8_t* panel, NextRows& next) {
                                                  P::F::prep_packed(q.w->row(r), nb, panel, next);
                                                });
  constexpr int kTokenSuperBlock = 512;
  for (int ts = 0; ts < q.n_tokens; ts += kTokenSuperBlock) {
    const int ts_end = q.n_tokens - ts > kTokenSuperBlock ? ts + kTokenSuperBlock : q.n_tokens;
    for (int64_t r = r0; r < r1; r += kRows) {
      const uint8_t* panel = q.w->row(r);
      NextRows next{panel + kPrefetchAhead, group_bytes, 0};
      int t = ts;
      if constexpr (!P::kWidensInTile)
        t = amx_tiles16<typename P::F, true>(q, panel, nb, r, ts, ts_end, amx);
      for (; t + P::kTT <= ts_end; t += P::kTT)
        packed_tile_at<P, P::kTT>(q, panel, nb, r, t, t == ts ? &next : nullptr);
      if (t < ts_end)
        packed_tile_remainder<P, P::kTT - 1>(q, panel, nb, r, t, ts_end - t,
                                             t == ts ? &next : nullptr);
    }
  }
}

// One token (or a few, one after another) against 16 packed rows at a time: the one-token tile's
// integer block sums and float steps, so the same bits, in a loop of its own, and with no software
// prefetch into L1: each thread reads one contiguous stream, which the hardware prefetcher
// follows, and fetching the next group ahead (34-49 KB on 2048-2880 columns, L1's size) cost more
// than it gave; into L2, kPrefetchFar ahead, it pays. Two threads, tg32 tok/s, alternated runs:
// on an Intel Xeon, the Qwen3-30B-A3B 6-layer Q8_0 cut 36.6 / 36.4 -> 40.0 / 39.9 with the L2
// stream (82-85% -> 92-94% of the probe), Qwen2.5-0.5B Q8_0 46.6 / 46.4 -> 48.8 / 49.5; earlier,
// on the Zen 5 host, the 30B cut (88% of its step in this kernel): through the
// tile 52.6 / 56.6 / 57.9, this loop prefetching the next group 63.8 / 68.5 / 61.7 and 58.5 / 61.8
// / 66.6, without 65.3 / 67.4 / 70.9 (prefetching 2-16 KB ahead: between the two); the gpt-oss-20b
// 8-layer cut (Q8_0 attention and head, 2/3 of its bytes) 33.3 / 34.2 / 35.4 -> 37.6 / 38.7 / 39.7
// without. (The q4_K / q6_K decode kernels, 2.3-3.4 KB a block, lose a third without theirs;
// MXFP4's is level either way.)
template <WType T>
void gemv_packed32(const QuantTask& q, int64_t r0, int64_t r1) {
  using F = Block32<T>;
  static_assert(!F::kMx, "MXFP4 has a decode kernel of its own (gemv_mxfp4_avx512.cpp)");
  const int64_t nb = q.w->cols / kQK;
  for (int64_t r = r0; r < r1; r += kRows) {
    const uint8_t* panel = q.w->row(r);
    for (int t = 0; t < q.n_tokens; ++t) {
      const uint8_t* act = q.act + size_t(t) * q.act_row_bytes;
      const float* scales = q.act_scales + size_t(t) * size_t(nb);
      const int32_t* sums = q.act_sums + size_t(t) * size_t(nb);
      __m512 acc = _mm512_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* p = panel + size_t(b) * F::kPackedBytes;
        if (t == 0) prefetch_block<F::kPackedBytes, false>(p);
        const uint8_t* aq = act + size_t(b) * sizeof(BlockQ8_0) + 2;
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int g = 0; g < 8; g += 2) {
          s0 =
              _mm512_dpbusd_epi32(s0, F::vnni_codes(F::packed_codes(p, g)), bcast4_512(aq + 4 * g));
          s1 = _mm512_dpbusd_epi32(s1, F::vnni_codes(F::packed_codes(p, g + 1)),
                                   bcast4_512(aq + 4 * g + 4));
        }
        __m512i isum = _mm512_add_epi32(s0, s1);
        if constexpr (F::kOffset != 0)
          isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(F::kOffset * sums[b]));
        const __m512 da = _mm512_set1_ps(scales[b]);
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
        acc = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(isum), acc);
        if constexpr (F::kMin) {
          const __m512 mw = _mm512_cvtph_ps(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + quant::kPacked32MinsOffset)));
          acc = _mm512_fmadd_ps(_mm512_mul_ps(mw, da), _mm512_set1_ps(float(sums[b])), acc);
        }
      }
      _mm512_storeu_ps(q.y + size_t(t) * size_t(q.w->rows) + size_t(r), acc);
    }
  }
}

// Up to this many tokens a packed q4_K / q6_K call takes the decode kernels
// (gemv_packed_avx512.cpp), each token on its own; more take the tiles, which share each widened
// code register between tokens: two tokens over 131072 rows from memory, one core
// (matmul_quant_bench *_streamed_2tok_packed), 2.7 / 5.2 ms through the decode kernel twice
// against 2.2 / 3.8 ms through the two-token tile (q4_K / q6_K).
constexpr int kPackedGemvTokens = 1;

template <class P, QuantTileFn kGemv>
void rows_packed16_gemv(const QuantTask& q, int64_t r0, int64_t r1) {
  if (q.n_tokens <= kPackedGemvTokens) return kGemv(q, r0, r1);
  rows_packed16<P>(q, r0, r1);
}

}  // namespace

QuantTileFn quant_tile_packed_avx512(QuantType t) {
  switch (t) {
    case QuantType::Q8_0:
      return rows_packed16_gemv<Packed32<WType::Q8_0>, gemv_packed32<WType::Q8_0>>;
    case QuantType::Q4_0:
      return rows_packed16_gemv<Packed32<WType::Q4_0>, gemv_packed32<WType::Q4_0>>;
    case QuantType::Q5_0:
      return rows_packed16_gemv<Packed32<WType::Q5_0>, gemv_packed32<WType::Q5_0>>;
    case QuantType::Q4_1:
      return rows_packed16_gemv<Packed32<WType::Q4_1>, gemv_packed32<WType::Q4_1>>;
    case QuantType::Q5_1:
      return rows_packed16_gemv<Packed32<WType::Q5_1>, gemv_packed32<WType::Q5_1>>;
    case QuantType::MXFP4:
      return rows_packed16_gemv<Packed32<WType::MXFP4>, gemv_packed_mxfp4>;
    case QuantType::IQ4_NL:
      return rows_packed16_gemv<Packed32<WType::IQ4_NL>, gemv_packed32<WType::IQ4_NL>>;
    case QuantType::Q4_K:
      return rows_packed16_gemv<PackedK<K4<false>>, gemv_packed_q4_k>;
    case QuantType::Q5_K:
      return rows_packed16<PackedK<K4<true>>>;
    case QuantType::Q6_K:
      return rows_packed16_gemv<PackedK<Q6K>, gemv_packed_q6_k>;
    default:
      return quant_tile_packed_lowbit_avx512(t);  // q2_K, q3_K, iq4_xs, or null
  }
}

QuantTileFn quant_tile_avx512(QuantType t) {
  switch (t) {
    case QuantType::Q8_0:
      return rows_panels16<Block32<WType::Q8_0>>;
    case QuantType::Q4_0:
      return rows_panels16<Block32<WType::Q4_0>>;
    case QuantType::Q5_0:
      return rows_panels16<Block32<WType::Q5_0>>;
    case QuantType::Q4_1:
      return rows_panels16<Block32<WType::Q4_1>>;
    case QuantType::Q5_1:
      return rows_panels16<Block32<WType::Q5_1>>;
    case QuantType::MXFP4:
      return rows_panels16<Block32<WType::MXFP4>>;
    case QuantType::Q4_K:
      return rows_panels16<K4<false>>;
    case QuantType::Q5_K:
      return rows_panels16<K4<true>>;
    case QuantType::Q6_K:
      return rows_panels16<Q6K>;
    case QuantType::IQ4_NL:
      return rows_panels16<Block32<WType::IQ4_NL>>;
    default:
      return quant_tile_lowbit_avx512(t);  // q2_K, q3_K, iq4_xs, or null
  }
}

}  // namespace fak::kernels
