// AVX2 prefill kernels for q2_K, q3_K and iq4_xs against Q8_K activations, on panels of 8 rows in
// lanes (gemm_avx2.h): register r of a block's codes holds elements 4r..4r+3 of row i in lane i, so
// one maddubs multiplies 4 codes of each of the 8 rows by the same 4 activation bytes.
//
// note: bit-identical to vec_dot (dot_lowbit_ref.cpp's block-serial rule): exact integer block
// sums, then per block the same float steps lane by lane. matmul_quant_test checks it.
#include <cstddef>

#include "ops/quant/gemm_avx2.h"
#include "quant/lowbit_avx2.h"
#include "quant/quant_blocks.h"

namespace fak::kernels {

namespace {

using namespace fak::quant;

inline __m256i load_a(const uint8_t* p) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
}

// The 8 rows' 32-byte vectors v[i] transposed into 8 registers stored at out (register g: bytes
// 4g..4g+3 of row i in lane i).
inline void store_transposed(__m256i v[8], uint8_t* out) {
  transpose8_epi32(v);
  for (int g = 0; g < 8; ++g) _mm256_store_si256(reinterpret_cast<__m256i*>(out + 32 * g), v[g]);
}

// q2_K / q3_K panel block (16 sub-blocks of 16 elements, unsigned codes u in [0, 3] / [0, 7]):
// d[8] (floats), q2_K's dmin[8], sc[16] (lane i: the int16 pair (s_k, s_k) of row i, s_k the
// sub-block scale, signed for q3_K), pairs[8] (lane i: (t_2k, t_2k+1), t the q2_K mins / the q3_K
// scales, for the per-token correction from the activation's bsums), then 64 code registers.
// The correction: q2_K subtracts dmin Σ_k m_k bsum_k as a second fma; q3_K's codes are q + 4, so
// 4 Σ_k s_k bsum_k comes off the integer sum.
template <bool kQ2>
struct Sub16 {
  using Block = std::conditional_t<kQ2, BlockQ2K, BlockQ3K>;
  static constexpr int kBlock = kQKK;
  static constexpr int kOffSc = kQ2 ? 64 : 32, kOffPairs = kOffSc + 16 * 32,
                       kOffCodes = kOffPairs + 8 * 32;
  static constexpr int kPanelBytes = kOffCodes + 64 * 32;
  static constexpr int kTT = 4;

  // Elements 32g .. 32g + 31 of row w as unsigned codes.
  static __m256i codes(const Block& w, int g) {
    const __m256i low = low2_codes(load256(w.qs + 32 * (g / 4)), g % 4);
    if constexpr (kQ2) {
      return low;
    } else {
      const __m256i high =
          _mm256_and_si256(_mm256_srli_epi16(load256(w.hmask), g), _mm256_set1_epi8(1));
      return _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
    }
  }

  static void prep(const uint8_t* const* rows, int64_t nb, uint8_t* panel) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* p = panel + size_t(b) * kPanelBytes;
      const Block* blk[8];
      for (int i = 0; i < 8; ++i) blk[i] = reinterpret_cast<const Block*>(rows[i]) + b;
      const size_t at = size_t(b) * sizeof(Block);
      _mm256_store_ps(reinterpret_cast<float*>(p), gather_f16x8(rows, at + offsetof(Block, d)));
      int16_t s[8][16], t[8][16];
      for (int i = 0; i < 8; ++i) {
        if constexpr (kQ2) {
          for (int k = 0; k < 16; ++k) {
            s[i][k] = int16_t(blk[i]->scales[k] & 0xF);
            t[i][k] = int16_t(blk[i]->scales[k] >> 4);
          }
        } else {
          int8_t sc[16];
          unpack_scales_q3_k(blk[i]->scales, sc);
          for (int k = 0; k < 16; ++k) s[i][k] = t[i][k] = sc[k];
        }
      }
      if constexpr (kQ2)
        _mm256_store_ps(reinterpret_cast<float*>(p + 32),
                        gather_f16x8(rows, at + offsetof(BlockQ2K, dmin)));
      auto* sc32 = reinterpret_cast<uint32_t*>(p + kOffSc);
      auto* pr32 = reinterpret_cast<uint32_t*>(p + kOffPairs);
      for (int k = 0; k < 16; ++k)
        for (int i = 0; i < 8; ++i) sc32[8 * k + i] = uint16_t(s[i][k]) * 0x10001u;
      for (int k = 0; k < 8; ++k)
        for (int i = 0; i < 8; ++i)
          pr32[8 * k + i] = uint16_t(t[i][2 * k]) | uint32_t(uint16_t(t[i][2 * k + 1])) << 16;
      for (int g = 0; g < 8; ++g) {
        __m256i v[8];
        for (int i = 0; i < 8; ++i) v[i] = codes(*blk[i], g);
        store_transposed(v, p + kOffCodes + 256 * g);
      }
    }
  }

  template <int TT>
  static void tile(const uint8_t* panel, int64_t nb, const TileArgs<TT>& args) {
    __m256 acc[TT];
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = panel + size_t(b) * kPanelBytes;
      const BlockQ8K* a[TT];
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) a[j] = reinterpret_cast<const BlockQ8K*>(args.acts[j]) + b;
      __m256i isum[TT];
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) isum[j] = _mm256_setzero_si256();
        // A sub-block is 4 code registers; its pair sums (<= 2 * 7 * 127 each) add up in int16.
#pragma GCC unroll 1
      for (int k = 0; k < 16; ++k) {
        const __m256i sc = load_a(p + kOffSc + 32 * k);
        const uint8_t* codes = p + kOffCodes + 128 * k;
        const __m256i w0 = load_a(codes), w1 = load_a(codes + 32);
        const __m256i w2 = load_a(codes + 64), w3 = load_a(codes + 96);
#pragma GCC unroll 16
        for (int j = 0; j < TT; ++j) {
          const int8_t* aq = a[j]->qs + 16 * k;
          const __m256i s01 = _mm256_add_epi16(_mm256_maddubs_epi16(w0, bcast4(aq)),
                                               _mm256_maddubs_epi16(w1, bcast4(aq + 4)));
          const __m256i s23 = _mm256_add_epi16(_mm256_maddubs_epi16(w2, bcast4(aq + 8)),
                                               _mm256_maddubs_epi16(w3, bcast4(aq + 12)));
          isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(_mm256_add_epi16(s01, s23), sc));
        }
      }
      const __m256 dw = _mm256_load_ps(reinterpret_cast<const float*>(p));
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) {
        __m256i corr = _mm256_madd_epi16(load_a(p + kOffPairs), bcast4(&a[j]->bsums[0]));
#pragma GCC unroll 8
        for (int k = 1; k < 8; ++k)
          corr = _mm256_add_epi32(
              corr, _mm256_madd_epi16(load_a(p + kOffPairs + 32 * k), bcast4(&a[j]->bsums[2 * k])));
        const __m256 da = _mm256_set1_ps(a[j]->d);
        if constexpr (kQ2) {
          const __m256 dmw = _mm256_load_ps(reinterpret_cast<const float*>(p + 32));
          acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(isum[j]), acc[j]);
          acc[j] = _mm256_fnmadd_ps(_mm256_mul_ps(dmw, da), _mm256_cvtepi32_ps(corr), acc[j]);
        } else {
          const __m256i s = _mm256_sub_epi32(isum[j], _mm256_slli_epi32(corr, 2));
          acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(s), acc[j]);
        }
      }
    }
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) _mm256_storeu_ps(args.ys[j], acc[j]);
  }
};

// iq4_xs panel block: d[8] (floats), sc[8] (lane i: the int16 pair (ls_b, ls_b) of row i), then
// 64 registers of signed grid codes (sub-block b: registers 8b..8b+7). Signed codes take maddubs
// as |w| times the activation with w's sign, and a pair sum (<= 2 * 127 * 127) goes to int32 at
// once, through the scale's madd.
struct Iq4Xs {
  static constexpr int kBlock = kQKK;
  static constexpr int kOffSc = 32, kOffCodes = kOffSc + 8 * 32;
  static constexpr int kPanelBytes = kOffCodes + 64 * 32;
  static constexpr int kTT = 4;

  static void prep(const uint8_t* const* rows, int64_t nb, uint8_t* panel) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* p = panel + size_t(b) * kPanelBytes;
      const BlockIq4Xs* blk[8];
      for (int i = 0; i < 8; ++i) blk[i] = reinterpret_cast<const BlockIq4Xs*>(rows[i]) + b;
      _mm256_store_ps(reinterpret_cast<float*>(p),
                      gather_f16x8(rows, size_t(b) * sizeof(BlockIq4Xs)));
      auto* sc32 = reinterpret_cast<uint32_t*>(p + kOffSc);
      for (int s = 0; s < 8; ++s)
        for (int i = 0; i < 8; ++i)
          sc32[8 * s + i] =
              uint16_t(int16_t(iq4_xs_scale(blk[i]->scales_l, blk[i]->scales_h, s))) * 0x10001u;
      for (int s = 0; s < 8; ++s) {
        __m256i v[8];
        for (int i = 0; i < 8; ++i) v[i] = codes_iq4(blk[i]->qs + 16 * s);
        store_transposed(v, p + kOffCodes + 256 * s);
      }
    }
  }

  template <int TT>
  static void tile(const uint8_t* panel, int64_t nb, const TileArgs<TT>& args) {
    __m256 acc[TT];
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = panel + size_t(b) * kPanelBytes;
      const BlockQ8K* a[TT];
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) a[j] = reinterpret_cast<const BlockQ8K*>(args.acts[j]) + b;
      __m256i isum[TT];
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) isum[j] = _mm256_setzero_si256();
#pragma GCC unroll 1
      for (int s = 0; s < 8; ++s) {
        const __m256i sc = load_a(p + kOffSc + 32 * s);
        const uint8_t* codes = p + kOffCodes + 256 * s;
#pragma GCC unroll 2
        for (int g = 0; g < 8; ++g) {
          const __m256i w = load_a(codes + 32 * g);
          const __m256i wabs = _mm256_sign_epi8(w, w);
#pragma GCC unroll 16
          for (int j = 0; j < TT; ++j) {
            const __m256i av = _mm256_sign_epi8(bcast4(a[j]->qs + 32 * s + 4 * g), w);
            isum[j] =
                _mm256_add_epi32(isum[j], _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, av), sc));
          }
        }
      }
      const __m256 dw = _mm256_load_ps(reinterpret_cast<const float*>(p));
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j)
        acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(a[j]->d)),
                                 _mm256_cvtepi32_ps(isum[j]), acc[j]);
    }
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) _mm256_storeu_ps(args.ys[j], acc[j]);
  }
};

}  // namespace

QuantTileFn quant_tile_lowbit_avx2(QuantType t) {
  switch (t) {
    case QuantType::Q2_K:
      return rows_panels<Sub16<true>>;
    case QuantType::Q3_K:
      return rows_panels<Sub16<false>>;
    case QuantType::IQ4_XS:
      return rows_panels<Iq4Xs>;
    default:
      return nullptr;
  }
}

}  // namespace fak::kernels
