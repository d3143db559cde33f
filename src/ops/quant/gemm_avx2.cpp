// Register-tiled AVX2 matmul of quantised weights with quantised activations (prefill): a tile of
// RT weight rows x TT tokens is computed together, so each weight block is unpacked once for TT
// tokens and each activation block loaded once for RT rows.
//
// note: for every output the float operations are exactly those of the AVX2 vec_dot of the same
// type (dot_avx2.cpp): the same per-block integer sums in the same 8 lanes, the same scale
// products, the same accumulator(s) fed block by block in order and the same horizontal sums. Only
// the integer work is shared across the tile. matmul_test checks every tile shape bit for bit
// against vec_dot; that is what keeps prefill == decode (matmul.h).
#include <algorithm>

#include "ops/matmul_kernels.h"
#include "ops/quant/avx2_common.h"
#include "ops/quant/quant_blocks.h"

namespace fak::kernels {

namespace {

using namespace fak::quant;

struct Tile {
  const QuantTask& q;
  int64_t r;  // first row
  int t;      // first token
  const uint8_t* row(int i) const { return q.w->row(r + i); }
  const uint8_t* act(int j) const { return q.act + size_t(t + j) * q.act_row_bytes; }
  void store(int i, int j, float v) const {
    q.y[size_t(t + j) * size_t(q.w->rows) + size_t(r + i)] = v;
  }
};

// q8_0 / q4_0 / q5_0: signed codes, one scale per 32. q8_0's vec_dot alternates two accumulators
// (even / odd blocks); q4_0 and q5_0 use one.
template <WType T>
struct Signed32 {
  static constexpr int kAccs = T == WType::Q8_0 ? 2 : 1;
  static constexpr int kTT = T == WType::Q8_0 ? 2 : 4;  // tokens per tile: accumulators fit 16 regs

  static __m256i codes(const uint8_t* row, int64_t i) {
    if constexpr (T == WType::Q8_0) {
      return load256(reinterpret_cast<const BlockQ8_0*>(row)[i].qs);
    } else if constexpr (T == WType::Q4_0) {
      return _mm256_sub_epi8(unpack_nibbles(reinterpret_cast<const BlockQ4_0*>(row)[i].qs),
                             _mm256_set1_epi8(8));
    } else {
      const BlockQ5_0& b = reinterpret_cast<const BlockQ5_0*>(row)[i];
      const __m256i hi = _mm256_andnot_si256(bits_to_bytes(b.qh), _mm256_set1_epi8(char(0xF0)));
      return _mm256_or_si256(unpack_nibbles(b.qs), hi);
    }
  }
  static float scale(const uint8_t* row, int64_t i) {
    if constexpr (T == WType::Q8_0) return h2f(reinterpret_cast<const BlockQ8_0*>(row)[i].d);
    if constexpr (T == WType::Q4_0) return h2f(reinterpret_cast<const BlockQ4_0*>(row)[i].d);
    return h2f(reinterpret_cast<const BlockQ5_0*>(row)[i].d);
  }

  template <int RT, int TT>
  static void tile(const Tile& tl) {
    const int64_t nb = tl.q.w->cols / kQK;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[kAccs][RT][TT];
    for (auto& a : acc)
      for (auto& b : a)
        for (auto& c : b) c = _mm256_setzero_ps();
    const uint8_t* rows[RT];
    const BlockQ8_0* acts[TT];
    for (int i = 0; i < RT; ++i) rows[i] = tl.row(i);
    for (int j = 0; j < TT; ++j) acts[j] = reinterpret_cast<const BlockQ8_0*>(tl.act(j));
    // One block into accumulator set k (a compile-time index, so the accumulators stay in
    // registers).
    auto step = [&]<int k>(int64_t b) {
      __m256i w[RT], wabs[RT];
      float dw[RT];
      for (int i = 0; i < RT; ++i) {
        w[i] = codes(rows[i], b);
        wabs[i] = _mm256_sign_epi8(w[i], w[i]);
        dw[i] = scale(rows[i], b);
      }
      for (int j = 0; j < TT; ++j) {
        const __m256i a = load256(acts[j][b].qs);
        const float da = h2f(acts[j][b].d);
        for (int i = 0; i < RT; ++i) {
          // dot_i8(w, a), with |w| hoisted out of the token loop.
          const __m256i p =
              _mm256_madd_epi16(_mm256_maddubs_epi16(wabs[i], _mm256_sign_epi8(a, w[i])), ones);
          acc[k][i][j] =
              _mm256_fmadd_ps(_mm256_set1_ps(dw[i] * da), _mm256_cvtepi32_ps(p), acc[k][i][j]);
        }
      }
    };
    int64_t b = 0;
    if constexpr (kAccs == 2) {
      // vec_dot's order: even blocks into acc[0], odd into acc[1], a last odd-count block into [0].
      for (; b + 1 < nb; b += 2) {
        step.template operator()<0>(b);
        step.template operator()<1>(b + 1);
      }
    }
    for (; b < nb; ++b) step.template operator()<0>(b);
    for (int i = 0; i < RT; ++i)
      for (int j = 0; j < TT; ++j) {
        if constexpr (kAccs == 2)
          tl.store(i, j, hsum(_mm256_add_ps(acc[0][i][j], acc[1][i][j])));
        else
          tl.store(i, j, hsum(acc[0][i][j]));
      }
  }
};

// q4_K / q5_K against Q8_K: as dot_k4 in dot_avx2.cpp.
template <bool kFiveBit>
struct K4 {
  using Block = std::conditional_t<kFiveBit, BlockQ5K, BlockQ4K>;
  static constexpr int kTT = 4;

  template <int RT, int TT>
  static void tile(const Tile& tl) {
    const int64_t nb = tl.q.w->cols / kQKK;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[RT][TT];
    __m128 acc_m[RT][TT];
    for (int i = 0; i < RT; ++i)
      for (int j = 0; j < TT; ++j) {
        acc[i][j] = _mm256_setzero_ps();
        acc_m[i][j] = _mm_setzero_ps();
      }
    const Block* rows[RT];
    const BlockQ8K* acts[TT];
    for (int i = 0; i < RT; ++i) rows[i] = reinterpret_cast<const Block*>(tl.row(i));
    for (int j = 0; j < TT; ++j) acts[j] = reinterpret_cast<const BlockQ8K*>(tl.act(j));
    for (int64_t b = 0; b < nb; ++b) {
      __m256i scales[RT];
      for (int i = 0; i < RT; ++i) {
        const __m256i sm = scales_mins_k4(rows[i][b].scales);
        const __m128i sc128 = _mm256_castsi256_si128(sm);
        scales[i] = _mm256_set_m128i(sc128, sc128);
        for (int j = 0; j < TT; ++j) {
          const BlockQ8K& a = acts[j][b];
          const float dmin = load_f32(&a.d) * h2f(rows[i][b].dmin);
          const __m128i bs_lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.bsums));
          const __m128i bs_hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.bsums + 8));
          const __m128i mins_dot =
              _mm_madd_epi16(_mm256_extracti128_si256(sm, 1), _mm_hadd_epi16(bs_lo, bs_hi));
          acc_m[i][j] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(mins_dot), acc_m[i][j]);
        }
      }
      __m256i sumi[RT][TT];
      for (int i = 0; i < RT; ++i)
        for (int j = 0; j < TT; ++j) sumi[i][j] = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        __m256i lo[RT], hi[RT];
        for (int i = 0; i < RT; ++i) {
          const __m256i q4 = load256(rows[i][b].qs + 32 * c);
          lo[i] = _mm256_and_si256(q4, m4);
          hi[i] = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
          if constexpr (kFiveBit) {
            const __m256i hbits = _mm256_srli_epi16(load256(rows[i][b].qh), 2 * c);
            lo[i] = _mm256_add_epi8(
                lo[i], _mm256_slli_epi16(_mm256_and_si256(hbits, _mm256_set1_epi8(1)), 4));
            hi[i] = _mm256_add_epi8(
                hi[i], _mm256_slli_epi16(_mm256_and_si256(hbits, _mm256_set1_epi8(2)), 3));
          }
        }
        for (int j = 0; j < TT; ++j) {
          const __m256i a_lo = load256(acts[j][b].qs + 64 * c);
          const __m256i a_hi = load256(acts[j][b].qs + 64 * c + 32);
          for (int i = 0; i < RT; ++i) {
            const __m256i p_lo = _mm256_maddubs_epi16(lo[i], a_lo);
            const __m256i p_hi = _mm256_maddubs_epi16(hi[i], a_hi);
            sumi[i][j] = _mm256_add_epi32(sumi[i][j],
                                          _mm256_madd_epi16(broadcast_i16(scales[i], 2 * c), p_lo));
            sumi[i][j] = _mm256_add_epi32(
                sumi[i][j], _mm256_madd_epi16(broadcast_i16(scales[i], 2 * c + 1), p_hi));
          }
        }
      }
      for (int i = 0; i < RT; ++i)
        for (int j = 0; j < TT; ++j) {
          const float d = load_f32(&acts[j][b].d) * h2f(rows[i][b].d);
          acc[i][j] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[i][j]), acc[i][j]);
        }
    }
    for (int i = 0; i < RT; ++i)
      for (int j = 0; j < TT; ++j) tl.store(i, j, hsum(acc[i][j]) - hsum128(acc_m[i][j]));
  }
};

// q6_K against Q8_K: as dot_q6_k in dot_avx2.cpp.
struct Q6K {
  static constexpr int kTT = 3;
  template <int RT, int TT>
  static void tile(const Tile& tl) {
    const int64_t nb = tl.q.w->cols / kQKK;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i m2 = _mm256_set1_epi8(0x03);
    __m256 acc[RT][TT];
    for (auto& a : acc)
      for (auto& c : a) c = _mm256_setzero_ps();
    const BlockQ6K* rows[RT];
    const BlockQ8K* acts[TT];
    for (int i = 0; i < RT; ++i) rows[i] = reinterpret_cast<const BlockQ6K*>(tl.row(i));
    for (int j = 0; j < TT; ++j) acts[j] = reinterpret_cast<const BlockQ8K*>(tl.act(j));
    for (int64_t b = 0; b < nb; ++b) {
      __m128i sc8[RT];
      __m256i sumi[RT][TT];
      for (int i = 0; i < RT; ++i) {
        sc8[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i][b].scales));
        for (int j = 0; j < TT; ++j) sumi[i][j] = _mm256_setzero_si256();
      }
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h)
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) {
          const __m128i shuffle = _mm_set_epi64x(0x0101010101010101LL * (2 * (4 * h + g) + 1),
                                                 0x0101010101010101LL * (2 * (4 * h + g)));
          __m256i q[RT], sc[RT];
          for (int i = 0; i < RT; ++i) {
            const BlockQ6K& w = rows[i][b];
            const __m256i ql = load256(w.ql + 64 * h + 32 * (g & 1));
            const __m256i qh = load256(w.qh + 32 * h);
            const __m256i lo =
                g < 2 ? _mm256_and_si256(ql, m4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
            const __m256i hb = _mm256_and_si256(g == 0 ? qh : _mm256_srli_epi16(qh, 2 * g), m2);
            q[i] = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 4));
            sc[i] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8[i], shuffle));
          }
          for (int j = 0; j < TT; ++j) {
            const __m256i a = load256(acts[j][b].qs + 128 * h + 32 * g);
            for (int i = 0; i < RT; ++i)
              sumi[i][j] = _mm256_add_epi32(
                  sumi[i][j], _mm256_madd_epi16(sc[i], _mm256_maddubs_epi16(q[i], a)));
          }
        }
      for (int i = 0; i < RT; ++i)
        for (int j = 0; j < TT; ++j) {
          const BlockQ8K& a = acts[j][b];
          const __m256i offset = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8[i]), load256(a.bsums));
          const __m256i s = _mm256_sub_epi32(sumi[i][j], _mm256_slli_epi32(offset, 5));
          const float d = load_f32(&a.d) * h2f(rows[i][b].d);
          acc[i][j] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s), acc[i][j]);
        }
    }
    for (int i = 0; i < RT; ++i)
      for (int j = 0; j < TT; ++j) tl.store(i, j, hsum(acc[i][j]));
  }
};

template <class K, int RT>
void tokens(const QuantTask& q, int64_t r, int t0, int t1) {
  int t = t0;
  for (; t + K::kTT <= t1; t += K::kTT) K::template tile<RT, K::kTT>({q, r, t});
  switch (t1 - t) {
    case 3:
      K::template tile<RT, 3>({q, r, t});
      break;
    case 2:
      K::template tile<RT, 2>({q, r, t});
      break;
    case 1:
      K::template tile<RT, 1>({q, r, t});
      break;
    default:
      break;
  }
}

// 2-row x kTT-token tiles over cache blocks: 16 weight rows stay in L1/L2 while a block of
// activation rows streams past them.
template <class K>
void rows_tiled(const QuantTask& q, int64_t r0, int64_t r1) {
  constexpr int64_t kRowBlock = 16;
  constexpr int kTokenBlock = 64;
  for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
    const int64_t re = std::min(r1, rb + kRowBlock);
    for (int tb = 0; tb < q.n_tokens; tb += kTokenBlock) {
      const int te = std::min(q.n_tokens, tb + kTokenBlock);
      int64_t r = rb;
      for (; r + 2 <= re; r += 2) tokens<K, 2>(q, r, tb, te);
      if (r < re) tokens<K, 1>(q, r, tb, te);
    }
  }
}

}  // namespace

QuantTileFn quant_tile_avx2(QuantType t) {
  switch (t) {
    case QuantType::Q8_0:
      return rows_tiled<Signed32<WType::Q8_0>>;
    case QuantType::Q4_0:
      return rows_tiled<Signed32<WType::Q4_0>>;
    case QuantType::Q5_0:
      return rows_tiled<Signed32<WType::Q5_0>>;
    case QuantType::Q4_K:
      return rows_tiled<K4<false>>;
    case QuantType::Q5_K:
      return rows_tiled<K4<true>>;
    case QuantType::Q6_K:
      return rows_tiled<Q6K>;
    default:
      return nullptr;  // q4_1 / q5_1: rows of vec_dot
  }
}

}  // namespace fak::kernels
