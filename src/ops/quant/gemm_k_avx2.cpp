// AVX2 prefill kernels for the K-quants (q4_K, q5_K, q6_K) against Q8_K activations, on panels of
// 8 rows in lanes (gemm_avx2.h). The codes are unsigned and small, so maddubs takes them directly
// and several pair sums are added in int16 before the sub-block scale is applied with one madd:
// that is where these kernels save most of vec_dot's work.
//
// note: bit-identical to vec_dot (dot_ref.cpp's block-serial rule): the integer block sums are
// exact, and per block acc = fma(d_a * d_w, float(isum), acc) (then the mins term for q4_K/q5_K).
#include <cstddef>

#include "ops/quant/gemm_avx2.h"
#include "quant/quant_blocks.h"

namespace fak::kernels {

namespace {

using namespace fak::quant;

// The 32 bytes at row + offset for 8 rows, transposed into 8 registers and stored at out.
inline void store_transposed(__m256i v[8], uint8_t* out) {
  transpose8_epi32(v);
  for (int g = 0; g < 8; ++g) _mm256_store_si256(reinterpret_cast<__m256i*>(out + 32 * g), v[g]);
}

inline __m256i load_a(const uint8_t* p) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
}

// q4_K / q5_K panel block: d[8], dmin[8] (floats), sc[8 sub-blocks] (lane i: the int16 pair
// (sc, sc) of row i), mp[4] (lane i: (m_2k, m_2k+1) of row i), then 8 x 8 registers of codes
// (sub-block j, group g: codes 4g..4g+3 of sub-block j of row i in lane i).
template <bool kFiveBit>
struct K4 {
  using Block = std::conditional_t<kFiveBit, BlockQ5K, BlockQ4K>;
  static constexpr int kBlock = kQKK;
  static constexpr int kOffSc = 64, kOffMp = kOffSc + 8 * 32, kOffCodes = kOffMp + 4 * 32;
  static constexpr int kPanelBytes = kOffCodes + 64 * 32;
  static constexpr int kTT = 4;
  // Codes <= 15 (q4_K): 8 maddubs pair sums of 2 * 15 * 127 fit in int16, a whole sub-block;
  // codes <= 31 (q5_K): 4 of them.
  static constexpr int kGroupsPer16 = kFiveBit ? 4 : 8;

  static void prep(const uint8_t* const* rows, int64_t nb, uint8_t* panel) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* p = panel + size_t(b) * kPanelBytes;
      const Block* blk[8];
      for (int i = 0; i < 8; ++i) blk[i] = reinterpret_cast<const Block*>(rows[i]) + b;
      _mm256_store_ps(reinterpret_cast<float*>(p), gather_f16x8(rows, size_t(b) * sizeof(Block)));
      _mm256_store_ps(reinterpret_cast<float*>(p + 32),
                      gather_f16x8(rows, size_t(b) * sizeof(Block) + 2));
      uint8_t sc[8][8], m[8][8];
      for (int i = 0; i < 8; ++i) unpack_scales_k4(blk[i]->scales, sc[i], m[i]);
      auto* sc32 = reinterpret_cast<uint32_t*>(p + kOffSc);
      auto* mp32 = reinterpret_cast<uint32_t*>(p + kOffMp);
      for (int j = 0; j < 8; ++j)
        for (int i = 0; i < 8; ++i) sc32[8 * j + i] = sc[i][j] * 0x10001u;
      for (int k = 0; k < 4; ++k)
        for (int i = 0; i < 8; ++i) mp32[8 * k + i] = m[i][2 * k] | uint32_t(m[i][2 * k + 1]) << 16;
      for (int c = 0; c < 4; ++c) {
        __m256i lo[8], hi[8];
        for (int i = 0; i < 8; ++i) {
          const __m256i q4 = load256(blk[i]->qs + 32 * c);
          lo[i] = _mm256_and_si256(q4, m4);
          hi[i] = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
          if constexpr (kFiveBit) {
            const __m256i hb = _mm256_srli_epi16(load256(blk[i]->qh), 2 * c);
            lo[i] = _mm256_add_epi8(
                lo[i], _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(1)), 4));
            hi[i] = _mm256_add_epi8(
                hi[i], _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(2)), 3));
          }
        }
        store_transposed(lo, p + kOffCodes + (2 * c) * 256);
        store_transposed(hi, p + kOffCodes + (2 * c + 1) * 256);
      }
    }
  }

  template <int TT>
  static void tile(const uint8_t* panel, int64_t nb, const TileArgs<TT>& args) {
    const uint8_t* const* acts = args.acts;
    float* const* ys = args.ys;
    __m256 acc[TT];
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = panel + size_t(b) * kPanelBytes;
      const BlockQ8K* a[TT];
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) a[j] = reinterpret_cast<const BlockQ8K*>(acts[j]) + b;
      __m256i isum[TT];
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) isum[j] = _mm256_setzero_si256();
#pragma GCC unroll 1
      for (int s = 0; s < 8; ++s) {
        const __m256i sc = load_a(p + kOffSc + 32 * s);
        const uint8_t* codes = p + kOffCodes + 256 * s;
#pragma GCC unroll 16
        for (int g0 = 0; g0 < 8; g0 += kGroupsPer16) {
          __m256i s16[TT];
#pragma GCC unroll 16
          for (int j = 0; j < TT; ++j) s16[j] = _mm256_setzero_si256();
#pragma GCC unroll 1
          for (int g = g0; g < g0 + kGroupsPer16; ++g) {
            const __m256i w = load_a(codes + 32 * g);
#pragma GCC unroll 16
            for (int j = 0; j < TT; ++j) {
              const __m256i pr = _mm256_maddubs_epi16(w, bcast4(a[j]->qs + 32 * s + 4 * g));
              s16[j] = _mm256_add_epi16(s16[j], pr);
            }
          }
#pragma GCC unroll 16
          for (int j = 0; j < TT; ++j) {
            const __m256i s32 = _mm256_madd_epi16(s16[j], sc);
            isum[j] = _mm256_add_epi32(isum[j], s32);
          }
        }
      }
      const __m256 dw = _mm256_load_ps(reinterpret_cast<const float*>(p));
      const __m256 dmw = _mm256_load_ps(reinterpret_cast<const float*>(p + 32));
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) {
        // Σ_k m_k sums32_k: this token's 32-element sums, paired per madd.
        __m256i imin = _mm256_madd_epi16(load_a(p + kOffMp), bcast4(&a[j]->sums32[0]));
#pragma GCC unroll 16
        for (int k = 1; k < 4; ++k)
          imin = _mm256_add_epi32(
              imin, _mm256_madd_epi16(load_a(p + kOffMp + 32 * k), bcast4(&a[j]->sums32[2 * k])));
        const __m256 da = _mm256_set1_ps(a[j]->d);
        acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(isum[j]), acc[j]);
        acc[j] = _mm256_fnmadd_ps(_mm256_mul_ps(dmw, da), _mm256_cvtepi32_ps(imin), acc[j]);
      }
    }
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) _mm256_storeu_ps(ys[j], acc[j]);
  }
};

// q6_K panel block: d[8], sc[16] (lane i: (sc_k, sc_k) of row i as int16), scp[8] (lane i:
// (sc_2k, sc_2k+1)), then 8 x 8 registers of codes (32-element slice e, group g: codes
// 32e + 4g .. +3 of row i in lane i; slice e covers sub-blocks 2e and 2e + 1).
struct Q6K {
  static constexpr int kBlock = kQKK;
  static constexpr int kOffSc = 32, kOffScp = kOffSc + 16 * 32, kOffCodes = kOffScp + 8 * 32;
  static constexpr int kPanelBytes = kOffCodes + 64 * 32;
  static constexpr int kTT = 4;

  // Elements 32e .. 32e + 31 of a q6_K block as bytes in [0, 63] (as dot_q6_k's q[] in
  // dot_avx2.cpp: e = 4h + g).
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

  static void prep(const uint8_t* const* rows, int64_t nb, uint8_t* panel) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* p = panel + size_t(b) * kPanelBytes;
      const BlockQ6K* blk[8];
      for (int i = 0; i < 8; ++i) blk[i] = reinterpret_cast<const BlockQ6K*>(rows[i]) + b;
      _mm256_store_ps(reinterpret_cast<float*>(p),
                      gather_f16x8(rows, size_t(b) * sizeof(BlockQ6K) + offsetof(BlockQ6K, d)));
      auto* sc32 = reinterpret_cast<uint32_t*>(p + kOffSc);
      auto* scp32 = reinterpret_cast<uint32_t*>(p + kOffScp);
      for (int k = 0; k < 16; ++k)
        for (int i = 0; i < 8; ++i) sc32[8 * k + i] = uint16_t(blk[i]->scales[k]) * 0x10001u;
      for (int k = 0; k < 8; ++k)
        for (int i = 0; i < 8; ++i)
          scp32[8 * k + i] =
              uint16_t(blk[i]->scales[2 * k]) | uint32_t(uint16_t(blk[i]->scales[2 * k + 1])) << 16;
      for (int e = 0; e < 8; ++e) {
        __m256i v[8];
        for (int i = 0; i < 8; ++i) v[i] = codes(*blk[i], e);
        store_transposed(v, p + kOffCodes + 256 * e);
      }
    }
  }

  template <int TT>
  static void tile(const uint8_t* panel, int64_t nb, const TileArgs<TT>& args) {
    const uint8_t* const* acts = args.acts;
    float* const* ys = args.ys;
    __m256 acc[TT];
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = panel + size_t(b) * kPanelBytes;
      const BlockQ8K* a[TT];
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) a[j] = reinterpret_cast<const BlockQ8K*>(acts[j]) + b;
      __m256i isum[TT];
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) isum[j] = _mm256_setzero_si256();
// Sub-block k = 16 elements = 4 groups; codes <= 63, so two maddubs pair sums fit in int16.
#pragma GCC unroll 1
      for (int k = 0; k < 16; ++k) {
        const __m256i sc = load_a(p + kOffSc + 32 * k);
        const uint8_t* codes = p + kOffCodes + 128 * k;
#pragma GCC unroll 16
        for (int half = 0; half < 2; ++half) {
          const __m256i w0 = load_a(codes + 64 * half);
          const __m256i w1 = load_a(codes + 64 * half + 32);
#pragma GCC unroll 16
          for (int j = 0; j < TT; ++j) {
            const int8_t* aq = a[j]->qs + 16 * k + 8 * half;
            const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(w0, bcast4(aq)),
                                                 _mm256_maddubs_epi16(w1, bcast4(aq + 4)));
            const __m256i s32 = _mm256_madd_epi16(s16, sc);
            isum[j] = _mm256_add_epi32(isum[j], s32);
          }
        }
      }
      const __m256 dw = _mm256_load_ps(reinterpret_cast<const float*>(p));
#pragma GCC unroll 16
      for (int j = 0; j < TT; ++j) {
        // The -32 code offset: 32 Σ_k sc_k bsum_k, bsums paired per madd.
        __m256i off = _mm256_madd_epi16(load_a(p + kOffScp), bcast4(&a[j]->bsums[0]));
#pragma GCC unroll 16
        for (int k = 1; k < 8; ++k)
          off = _mm256_add_epi32(
              off, _mm256_madd_epi16(load_a(p + kOffScp + 32 * k), bcast4(&a[j]->bsums[2 * k])));
        const __m256i s = _mm256_sub_epi32(isum[j], _mm256_slli_epi32(off, 5));
        const __m256 da = _mm256_set1_ps(a[j]->d);
        acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(s), acc[j]);
      }
    }
#pragma GCC unroll 16
    for (int j = 0; j < TT; ++j) _mm256_storeu_ps(ys[j], acc[j]);
  }
};

}  // namespace

void rows_q4_k_avx2(const QuantTask& q, int64_t r0, int64_t r1) {
  rows_panels<K4<false>>(q, r0, r1);
}
void rows_q5_k_avx2(const QuantTask& q, int64_t r0, int64_t r1) {
  rows_panels<K4<true>>(q, r0, r1);
}
void rows_q6_k_avx2(const QuantTask& q, int64_t r0, int64_t r1) {
  rows_panels<Q6K>(q, r0, r1);
}

}  // namespace fak::kernels
