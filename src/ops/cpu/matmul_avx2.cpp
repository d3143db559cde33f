// AVX2+FMA matmul for float weights (f32, bf16, f16 widened in registers).
//
// Register tiles of RT weight rows x TT tokens, one 8-lane accumulator per output. note: each
// output's arithmetic (fma over k in steps of 8, zero-padded tail, fixed horizontal sum) is the
// same in every tile shape, so results do not depend on batch size or threading (see matmul.h).
#include <immintrin.h>

#include <cstring>

#include "ops/matmul_kernels.h"

namespace fak::kernels {

namespace {

template <WType T>
inline __m256 load8(const uint8_t* row, int64_t k) {
  if constexpr (T == WType::F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
  } else if constexpr (T == WType::BF16) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k));
    return _mm256_cvtph_ps(h);
  }
}

// The last n % 8 elements, zero-padded to a full vector.
template <WType T>
inline __m256 load_tail(const uint8_t* row, int64_t k, int64_t n) {
  alignas(32) uint8_t buf[32] = {};
  constexpr size_t kElem = T == WType::F32 ? 4 : 2;
  std::memcpy(buf, row + kElem * size_t(k), kElem * size_t(n - k));
  return load8<T>(buf, 0);
}

inline __m256 load_x_tail(const float* x, int64_t k, int64_t n) {
  alignas(32) float buf[8] = {};
  std::memcpy(buf, x + k, 4 * size_t(n - k));
  return _mm256_load_ps(buf);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// note: the accumulators must live in registers; GCC keeps them in a stack array (and runs ~5x
// slower) unless every loop over the tile is fully unrolled, hence the pragmas.
template <WType T, int RT, int TT>
__attribute__((always_inline)) inline void tile(const WeightMatrix& w, const float* x, float* y, int64_t r, int t) {
  const int64_t n = w.cols;
  const int64_t n8 = n & ~int64_t(7);
  const uint8_t* rows[RT];
  const float* xs[TT];
#pragma GCC unroll 8
  for (int i = 0; i < RT; ++i) rows[i] = w.row(r + i);
#pragma GCC unroll 4
  for (int j = 0; j < TT; ++j) xs[j] = x + size_t(t + j) * size_t(n);
  __m256 acc[RT][TT];
#pragma GCC unroll 8
  for (int i = 0; i < RT; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < TT; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t k = 0; k < n8; k += 8) {
    __m256 xv[TT];
#pragma GCC unroll 4
    for (int j = 0; j < TT; ++j) xv[j] = _mm256_loadu_ps(xs[j] + k);
#pragma GCC unroll 8
    for (int i = 0; i < RT; ++i) {
      __m256 wv = load8<T>(rows[i], k);
#pragma GCC unroll 4
      for (int j = 0; j < TT; ++j) acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
    }
  }
  if (n8 < n) {
    __m256 xv[TT];
#pragma GCC unroll 4
    for (int j = 0; j < TT; ++j) xv[j] = load_x_tail(xs[j], n8, n);
#pragma GCC unroll 8
    for (int i = 0; i < RT; ++i) {
      __m256 wv = load_tail<T>(rows[i], n8, n);
#pragma GCC unroll 4
      for (int j = 0; j < TT; ++j) acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < RT; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < TT; ++j) y[size_t(t + j) * size_t(w.rows) + size_t(r + i)] = hsum(acc[i][j]);
}

template <WType T, int RT>
void rows_block(const WeightMatrix& w, const float* x, int t0, int t1, float* y, int64_t r0,
                int64_t r1) {
  int64_t r = r0;
  for (; r + RT <= r1; r += RT) {
    int t = t0;
    if constexpr (RT == 4) {
      for (; t + 3 <= t1; t += 3) tile<T, 4, 3>(w, x, y, r, t);
      if (t1 - t == 2) {
        tile<T, 4, 2>(w, x, y, r, t);
        t += 2;
      }
    }
    for (; t < t1; ++t) tile<T, RT, 1>(w, x, y, r, t);
  }
  for (; r < r1; ++r) {
    int t = t0;
    for (; t + 3 <= t1; t += 3) tile<T, 1, 3>(w, x, y, r, t);
    for (; t < t1; ++t) tile<T, 1, 1>(w, x, y, r, t);
  }
}

template <WType T>
void rows_typed(const WeightMatrix& w, const float* x, int n_tokens, float* y, int64_t r0,
                int64_t r1) {
  if (n_tokens == 1) {
    rows_block<T, 8>(w, x, 0, 1, y, r0, r1);
    return;
  }
  // Cache blocking: a block of weight rows stays in L1/L2 while chunks of tokens stream past it.
  constexpr int64_t kRowBlock = 32;
  constexpr int kTokenBlock = 48;
  for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
    int64_t re = rb + kRowBlock < r1 ? rb + kRowBlock : r1;
    for (int t = 0; t < n_tokens; t += kTokenBlock) {
      int te = t + kTokenBlock < n_tokens ? t + kTokenBlock : n_tokens;
      rows_block<T, 4>(w, x, t, te, y, rb, re);
    }
  }
}

}  // namespace

void matmul_rows_avx2(const WeightMatrix& w, const float* x, int n_tokens, float* y, int64_t r0,
                      int64_t r1) {
  switch (w.type) {
    case WType::F32: return rows_typed<WType::F32>(w, x, n_tokens, y, r0, r1);
    case WType::BF16: return rows_typed<WType::BF16>(w, x, n_tokens, y, r0, r1);
    case WType::F16: return rows_typed<WType::F16>(w, x, n_tokens, y, r0, r1);
    default: return matmul_rows_ref(w, x, n_tokens, y, r0, r1);
  }
}

}  // namespace fak::kernels
