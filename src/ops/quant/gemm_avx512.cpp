// AVX-512 VNNI prefill kernels for q8_0, q4_0, q5_0, q4_1, q5_1, MXFP4 and IQ4_NL (against Q8_0
// activations; the K-quants' are in gemm_k4_avx512.cpp and gemm_q6k_avx512.cpp): the AVX2 panel
// scheme (gemm_avx2.h) widened to 16 weight rows in the 16 int32 lanes, with vpdpbusd doing 4 code
// x activation products per lane and adding them into the lane in one instruction (AVX2 needs sign,
// maddubs, madd and add for the same work on 8 rows), and AMX tiles for the integer sums where the
// CPU has them.
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
#include "ops/quant/rows_packed16_avx512.h"
#include "ops/quant/rows_panels16_avx512.h"
#include "ops/scratch.h"
#include "quant/packed_blocks.h"
#include "quant/quant_blocks.h"

namespace fak::kernels {

namespace {

using namespace fak::quant;

// q8_0 / q4_0 / q5_0 / q4_1 / q5_1 panel block: 16 float scales (and for q4_1 / q5_1 the 16
// float mins), then 8 registers of unsigned codes (register g: codes 4g..4g+3 of row i in lane i).
// MXFP4: its doubled E2M1 codes + 12, unsigned, and the E8M0 scales widened. IQ4_NL: its grid
// values + 128, as q8_0's codes (never packed at load: no packed layout is defined for it).
// kPackedU8: q8_0's codes packed at load + 128 (quant::kPackedQ8* with codes_u8, on CPUs without
// AMX), so the VNNI tiles take them as they are.
template <WType T, bool kPackedU8 = false>
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
  // Where the codes are stored + 128 instead (kPackedU8), the flip goes: one vector op a code
  // register, an eighth of a tile's VPDPBUSDs (one core, 4864 x 896 q8_0 packed, 128 tokens,
  // matmul_quant_bench, with the offset as the sums' start: 179-182 -> 196-197 GMAC/s), and the
  // AMX tiles take their sums unsigned (TDPBSUD) with the offset off, as for the nibble types.
  static constexpr bool kSignedCodes = T == WType::Q8_0 || T == WType::IQ4_NL;
  template <bool kPacked>
  static constexpr bool kSignedIn = kSignedCodes && !(kPacked && kPackedU8);
  template <bool kPacked>
  static __m512i vnni_codes(__m512i panel_codes) {
    if constexpr (kSignedIn<kPacked>) return _mm512_xor_si512(panel_codes, _mm512_set1_epi8(-128));
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
  // correction (-kOffset Σ a, added) and quant sum (Σ a, for the mins term), act(j) = {d_a,
  // -kOffset Σ a, Σ a}: the VNNI and the AMX tiles go through the same steps, reading those from
  // where each keeps them.
  struct ActBlock {
    float d;
    int32_t offset_add, sum;
  };
  // kNoOffset: the sums are the codes' own (the AMX tile's on signed codes), or had the offset
  // correction as their start (tile_blocks16).
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
        s = _mm512_add_epi32(s, _mm512_set1_epi32(a.offset_add));
      acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(s), acc[j]);
      if constexpr (kMin)  // + m Σ a: the min times the block's activation sum
        acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(mw, da), _mm512_set1_ps(float(a.sum)), acc[j]);
    }
  }

  // Block p's integer sums for TT tokens, start(j) + codes x activations: token j's 4 activation
  // bytes against code register g at act(j, g).
  template <int TT, bool kPacked, class Act, class Start>
  [[gnu::always_inline]] static void block_isums(const uint8_t* p, __m512i (&isum)[TT], Act act,
                                                 Start start) {
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) isum[j] = start(j);
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      const __m512i w =
          vnni_codes<kPacked>(kPacked ? packed_codes(p, g) : load_si(p + kCodesAt + 64 * g));
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) isum[j] = dpbusd_bcast4(isum[j], w, act(j, g));
    }
  }

  // kPacked: a prepacked panel (Packed32 below) instead of this call's own.
  template <int TT, bool kPacked = false>
  static void tile(const uint8_t* panel, int64_t nb, const TileArgs<TT>& args,
                   NextRows* next = nullptr) {
    if (args.blocks16) return tile_blocks16<TT, kPacked>(panel, nb, args, next);
    if constexpr (TT > kTT) {  // a wide tile's tokens without their blocks of 16: two passes
      TileArgs<kTT> first;
      TileArgs<TT - kTT> rest;
      for (int j = 0; j < TT; ++j) {
        if (j < kTT)
          first.acts[j] = args.acts[j], first.scales[j] = args.scales[j],
          first.sums[j] = args.sums[j], first.ys[j] = args.ys[j];
        else
          rest.acts[j - kTT] = args.acts[j], rest.scales[j - kTT] = args.scales[j],
                        rest.sums[j - kTT] = args.sums[j], rest.ys[j - kTT] = args.ys[j];
      }
      tile<kTT, kPacked>(panel, nb, first, next);
      return tile<TT - kTT, kPacked>(panel, nb, rest, nullptr);
    }
    constexpr size_t kStride = kPacked ? size_t(kPackedBytes) : size_t(kPanelBytes);
    __m512 acc[TT];
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      if (next) next->upto(b, nb);
      const uint8_t* p = panel + size_t(b) * kStride;
      const size_t ab = size_t(b) * sizeof(BlockQ8_0) + 2;  // this block's activation quants
      __m512i isum[TT];
      block_isums<TT, kPacked>(
          p, isum, [&](int j, int g) { return args.acts[j] + ab + 4 * g; },
          [](int) { return _mm512_setzero_si512(); });
      add_block<TT, kPacked>(
          acc, [&](int j) { return isum[j]; },
          [&](int j) {
            const int32_t sum = args.sums[j][b];
            return ActBlock{args.scales[j][b], -kOffset * sum, sum};
          },
          p);
    }
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) _mm512_storeu_ps(args.ys[j], acc[j]);
  }

  // tile's steps with the tokens' activations from their blocks of 16 (act_blocks16): each
  // block's codes, scales and offset sums a fixed distance from one pointer, so the loop keeps
  // its accumulators in registers (with a pointer per token and row it spilled them: one core,
  // 4864 x 896 q8_0 packed, 128 tokens, 107-120 -> 181 GMAC/s).
  // A tile of more than kTT tokens (9-16: packed q8_0's, rows_packed16) passes over the weights
  // once, each block's sums made kTT tokens at a time while every token's accumulator stays in a
  // register: a MoE expert's 9-16 tokens read its rows from memory once, with twice the
  // arithmetic to hide the reads behind, where a memory-bound first tile and an L1-bound second
  // took the time of both (Qwen3.5-35B-A3B Q8_0 cut, pp512, experts 0.470-0.483 -> 0.443-0.446 ms
  // a token). Each token's float steps are the same, in the same order: the same bits.
  template <int TT, bool kPacked>
  static void tile_blocks16(const uint8_t* panel, int64_t nb, const TileArgs<TT>& args,
                            NextRows* next) {
    constexpr size_t kStride = kPacked ? size_t(kPackedBytes) : size_t(kPanelBytes);
    const uint8_t* codes = args.blocks16 + 32 * size_t(args.m0);
    const uint8_t* scales = args.blocks16 + 512 + 4 * size_t(args.m0);
    __m512 acc[TT];
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, codes += kAmxActBlockBytes, scales += kAmxActBlockBytes) {
      if (next) next->upto(b, nb);
      const uint8_t* p = panel + size_t(b) * kStride;
      // act_tiles16 stored Σ a times -kOffset (times 1 for the q4_1 / q5_1 mins): the offset
      // correction is each sum's start, one broadcast load, where a subtract after took a vector
      // op a token and block (13 -> 12 for 8 VPDPBUSD; same integers).
      const auto* da = reinterpret_cast<const float*>(scales);
      const auto* asum = reinterpret_cast<const int32_t*>(scales + 64);
      // Tokens [J0, J0 + HN): their integer sums in registers, then their float steps.
      const auto part = [&]<int J0, int HN>() {
        __m512i isum[HN];
        block_isums<HN, kPacked>(
            p, isum, [&](int j, int g) { return codes + 32 * (J0 + j) + 4 * g; },
            [&](int j) {
              return kOffset != 0 ? _mm512_set1_epi32(asum[J0 + j]) : _mm512_setzero_si512();
            });
        const auto sums_j = [&](int j) { return isum[j]; };
        const auto act_j = [&](int j) { return ActBlock{da[J0 + j], asum[J0 + j], asum[J0 + j]}; };
        add_block<HN, kPacked, decltype(sums_j), decltype(act_j), true>(acc + J0, sums_j, act_j, p);
      };
      part.template operator()<0, (TT > kTT ? kTT : TT)>();
      if constexpr (TT > kTT) part.template operator()<kTT, TT - kTT>();
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
    tile_amx<16, kPacked>(q, panel, nb, r, t, n_valid, stream);
  }
  // Tokens [t, t + 8) (t a multiple of 16) on 8-row tiles: packed q8_0's few-token calls (a few
  // sequences decoding together), whose padded 16-token tile made twice the float steps needed.
  static void tile_amx8(const QuantTask& q, const uint8_t* panel, int64_t nb, int64_t r, int t,
                        int n_valid, bool stream) {
    static_assert(T == WType::Q8_0);
    tile_amx<8, true>(q, panel, nb, r, t, n_valid, stream);
  }
  template <int TT, bool kPacked>
  static void tile_amx(const QuantTask& q, const uint8_t* panel, int64_t nb, int64_t r, int t,
                       int n_valid, bool stream) {
    static_assert(!kPacked || T == WType::Q8_0, "packed codes other than q8_0's widen in the tile");
    static_assert(TT == 16 || TT == 8);
    const uint8_t* acts = q.amx_acts + size_t(t / 16) * size_t(nb) * kAmxActBlockBytes;
    float* y = q.y + size_t(t) * size_t(q.w->rows) + size_t(r);
    const size_t y_stride = size_t(q.w->rows);
    constexpr size_t kStride = kPacked ? size_t(kPackedBytes) : size_t(kPanelBytes);
    constexpr size_t kCodes = kPacked ? size_t(kPackedCodes) : size_t(kCodesAt);
    constexpr size_t kSums = size_t(TT) * 16;  // ints of a block's sums
    // Blocks a chunk: 8 KB of sums, read back from L1. The tile unit makes chunk c + 1's sums while
    // the vector units do chunk c's float steps (issued in that order, so both are in flight).
    constexpr int kChunk = 8;
    alignas(64) int32_t sums[2][kChunk * kSums];
    const int64_t chunks = (nb + kChunk - 1) / kChunk;
    const auto sums_of = [&](int64_t c) {
      const int64_t b0 = c * kChunk;
      amx_block_sums16<kSignedIn<kPacked>, kSums>(
          acts + size_t(b0) * kAmxActBlockBytes, 32, kAmxActBlockBytes,
          panel + size_t(b0) * kStride + kCodes, kStride, int(nb - b0 < kChunk ? nb - b0 : kChunk),
          sums[c & 1]);
    };
    if constexpr (TT == 16)
      amx_configure_tiles();
    else
      amx_use_config(block_sums8_tile_config());
    __m512 acc[TT];
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) acc[j] = _mm512_setzero_ps();
    sums_of(0);
    for (int64_t c = 0; c < chunks; ++c) {
      if (c + 1 < chunks) sums_of(c + 1);
      const int64_t b0 = c * kChunk;
      const int n = int(nb - b0 < kChunk ? nb - b0 : kChunk);
      for (int i = 0; i < n; ++i) {
        const uint8_t* a = acts + size_t(b0 + i) * kAmxActBlockBytes;
        const auto* da = reinterpret_cast<const float*>(a + 512);
        // amx_act_tiles stored Σ a times -kOffset (times 1 for the q4_1 / q5_1 mins).
        const auto* asum = reinterpret_cast<const int32_t*>(a + 576);
        // The first tile of a packed group reads it from memory: kPrefetchFar ahead into L2 (an
        // expert sees ~32 tokens, two tiles, so its weights' latency showed: pp512 GLM-4.5-Air
        // Q8_0 cut 341 / 326 / 289 -> 354 / 359 / 314 tok/s alternated; the whole next group
        // over the first tile instead, a little less; the 30B-A3B Q8_0 cut level).
        if (stream) prefetch_block<kStride, false>(panel + size_t(b0 + i) * kStride);
        const int32_t* s = sums[c & 1] + i * kSums;
        const auto sums_j = [&](int j) { return _mm512_load_si512(s + 16 * j); };
        const auto act_j = [&](int j) { return ActBlock{da[j], asum[j], asum[j]}; };
        add_block<TT, kPacked, decltype(sums_j), decltype(act_j), kSignedIn<kPacked>>(
            acc, sums_j, act_j, panel + size_t(b0 + i) * kStride);
      }
    }
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j)
      if (j < n_valid) _mm512_storeu_ps(y + size_t(j) * y_stride, acc[j]);
  }
};

// Weights packed once, at load, into panels the tiles read in place of the rows (every type here:
// quant_blocks.h's kPacked* / packed32_*). Each keeps what a call's own panel widens (fp16 scales
// and mins, the K-quants' packed 6-bit scales, nibbles and high bits) as stored, so 16 rows' block
// is the bytes they took, and the tile widens it. Calls then skip the repack, which was most of a
// call of 2-16 tokens (perf, 8 sequences: 44% of the samples against 25% in the tiles). The
// families, each read by its F::tile<TT, true> (kWidensInTile: the tile rebuilds codes from the
// packed bytes, as all but q8_0's are):
template <WType T, bool kPackedU8 = false>
struct Packed32 {
  using F = Block32<T, kPackedU8>;
  static constexpr int kBlock = kQK, kTT = F::kTT;
  static constexpr bool kWidensInTile = T != WType::Q8_0;
};

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
template <WType T, bool kPackedU8 = false>
void gemv_packed32(const QuantTask& q, int64_t r0, int64_t r1) {
  using F = Block32<T, kPackedU8>;
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
          s0 = _mm512_dpbusd_epi32(s0, F::template vnni_codes<true>(F::packed_codes(p, g)),
                                   bcast4_512(aq + 4 * g));
          s1 = _mm512_dpbusd_epi32(s1, F::template vnni_codes<true>(F::packed_codes(p, g + 1)),
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

}  // namespace

QuantTileFn quant_tile_packed_avx512(QuantType t, bool codes_u8) {
  switch (t) {
    case QuantType::Q8_0:
      if (codes_u8)
        return rows_packed16_gemv<Packed32<WType::Q8_0, true>, gemv_packed32<WType::Q8_0, true>>;
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
    case QuantType::Q5_K:
      return quant_tile_packed_k4_avx512(t);
    case QuantType::Q6_K:
      return quant_tile_q6k_avx512(true);
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
    case QuantType::Q5_K:
      return quant_tile_k4_avx512(t);
    case QuantType::Q6_K:
      return quant_tile_q6k_avx512(false);
    case QuantType::IQ4_NL:
      return rows_panels16<Block32<WType::IQ4_NL>>;
    default:
      return quant_tile_lowbit_avx512(t);  // q2_K, q3_K, iq4_xs, or null
  }
}

}  // namespace fak::kernels
