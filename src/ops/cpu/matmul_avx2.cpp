// AVX2+FMA matmul for float weights (f32, bf16, f16 widened in registers).
//
// Register tiles of RT weight rows x TT tokens, one 8-lane accumulator per output. note: each
// output's arithmetic (fma over k in steps of 8, zero-padded tail, fixed horizontal sum) is the
// same in every tile shape, so results do not depend on batch size or threading (see matmul.h).
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "ops/cpu/float_rows.h"
#include "ops/matmul_kernels.h"

namespace fak::kernels {

namespace {

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
// Weight rows as the kernels see them: stored rows of a matrix, or a panel of rows already widened
// to f32 (prefill of f16/bf16 weights widens each row once per token block, not once per tile).
struct Rows {
  const uint8_t* base;
  size_t row_bytes;
  int64_t first;  // row index of base
  const uint8_t* row(int64_t r) const { return base + size_t(r - first) * row_bytes; }
};

template <WType T, int RT, int TT>
__attribute__((always_inline)) inline void tile(const Rows& w, int64_t n, const float* x, float* y,
                                                size_t ldy, int64_t r, int t) {
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
  // Decode streams RT rows at once: fetch the next RT rows a cache line at a time while these are
  // used, so the stream never waits on DRAM latency (more concurrent streams than the hardware
  // prefetcher follows well), and the same lines kFarBytes further on into L2, as the quantised
  // decode kernels do (panels_avx512.h's kPrefetchFar): the L1 stream alone holds too few lines in
  // flight to keep memory busy. Prefetches past the matrix are harmless.
  constexpr size_t kElem = T == WType::F32 ? 4 : 2;
  constexpr int64_t kLineElems = int64_t(64 / kElem);
  constexpr size_t kFarBytes = 16384;
  const size_t ahead = size_t(RT) * w.row_bytes;
  for (int64_t k = 0; k < n8; k += 8) {
    if constexpr (TT == 1 && RT == 8) {
      if (k % kLineElems == 0) {
#pragma GCC unroll 8
        for (int i = 0; i < RT; ++i) {
          const char* line = reinterpret_cast<const char*>(rows[i] + ahead + size_t(k) * kElem);
          _mm_prefetch(line, _MM_HINT_T0);
          _mm_prefetch(line + kFarBytes, _MM_HINT_T1);
        }
      }
    }
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
    for (int j = 0; j < TT; ++j) y[size_t(t + j) * ldy + size_t(r + i)] = hsum(acc[i][j]);
}

template <WType T, int RT>
void rows_block(const Rows& w, int64_t n, const float* x, int t0, int t1, float* y, size_t ldy,
                int64_t r0, int64_t r1) {
  int64_t r = r0;
  for (; r + RT <= r1; r += RT) {
    int t = t0;
    if constexpr (RT == 4) {
      for (; t + 3 <= t1; t += 3) tile<T, 4, 3>(w, n, x, y, ldy, r, t);
      if (t1 - t == 2) {
        tile<T, 4, 2>(w, n, x, y, ldy, r, t);
        t += 2;
      }
    }
    for (; t < t1; ++t) tile<T, RT, 1>(w, n, x, y, ldy, r, t);
  }
  for (; r < r1; ++r) {
    int t = t0;
    for (; t + 3 <= t1; t += 3) tile<T, 1, 3>(w, n, x, y, ldy, r, t);
    for (; t < t1; ++t) tile<T, 1, 1>(w, n, x, y, ldy, r, t);
  }
}

// Widens rows [r0, r1) of a half-precision matrix into an f32 panel (exact: every f16/bf16 value
// is an f32 value, so the products and sums that follow are the same as on the stored rows).
template <WType T>
void widen_rows(const WeightMatrix& w, int64_t r0, int64_t r1, float* panel) {
  const int64_t n = w.cols, n8 = n & ~int64_t(7);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* src = w.row(r);
    float* dst = panel + size_t(r - r0) * size_t(n);
    for (int64_t k = 0; k < n8; k += 8) _mm256_storeu_ps(dst + k, load8<T>(src, k));
    if (n8 < n) {
      alignas(32) float tail[8];
      _mm256_store_ps(tail, load_tail<T>(src, n8, n));
      std::memcpy(dst + n8, tail, sizeof(float) * size_t(n - n8));
    }
  }
}

template <WType T>
void rows_typed(const WeightMatrix& w, const float* x, int n_tokens, float* y, int64_t r0,
                int64_t r1) {
  const Rows stored{static_cast<const uint8_t*>(w.data), w.row_bytes, 0};
  const size_t ldy = size_t(w.rows);
  if (n_tokens == 1) {
    rows_block<T, 8>(stored, w.cols, x, 0, 1, y, ldy, r0, r1);
    return;
  }
  // Cache blocking: a block of weight rows stays in L1/L2 while chunks of tokens stream past it.
  // Half-precision rows are widened once per block when enough tokens share them.
  constexpr int64_t kRowBlock = 16;
  constexpr int kTokenBlock = 48;
  const bool widen = T != WType::F32 && n_tokens >= 6;
  thread_local std::vector<float> panel;
  if (widen) panel.resize(size_t(kRowBlock) * size_t(w.cols));
  for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
    const int64_t re = rb + kRowBlock < r1 ? rb + kRowBlock : r1;
    if (widen) widen_rows<T>(w, rb, re, panel.data());
    const Rows wide{reinterpret_cast<const uint8_t*>(panel.data()), sizeof(float) * size_t(w.cols),
                    rb};
    for (int t = 0; t < n_tokens; t += kTokenBlock) {
      const int te = t + kTokenBlock < n_tokens ? t + kTokenBlock : n_tokens;
      if (widen)
        rows_block<WType::F32, 4>(wide, w.cols, x, t, te, y, ldy, rb, re);
      else
        rows_block<T, 4>(stored, w.cols, x, t, te, y, ldy, rb, re);
    }
  }
}

}  // namespace

void matmul_rows_avx2(const WeightMatrix& w, const float* x, int n_tokens, float* y, int64_t r0,
                      int64_t r1) {
  switch (w.type) {
    case WType::F32:
      return rows_typed<WType::F32>(w, x, n_tokens, y, r0, r1);
    case WType::BF16:
      return rows_typed<WType::BF16>(w, x, n_tokens, y, r0, r1);
    case WType::F16:
      return rows_typed<WType::F16>(w, x, n_tokens, y, r0, r1);
    default:
      return matmul_rows_ref(w, x, n_tokens, y, r0, r1);
  }
}

}  // namespace fak::kernels
