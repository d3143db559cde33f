#include <immintrin.h>

#include "core/dtype.h"
#include "ops/cpu/exp_avx2.h"
#include "ops/vec.h"

namespace fak {

const VecKernels& vec_kernels_avx2();

namespace {

float dot_avx2(const float* a, const float* b, int n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8)
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  __m256 acc = _mm256_add_ps(acc0, acc1);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  float r = _mm_cvtss_f32(s);
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

void axpy_avx2(float* y, float a, const float* x, int n) {
  const __m256 av = _mm256_set1_ps(a);
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

inline __m256 widen_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 widen_bf16(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

template <__m256 (*Widen)(const uint16_t*), float (*Scalar)(uint16_t)>
float dot_half_avx2(const float* a, const uint16_t* b, int n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), Widen(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), Widen(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), Widen(b + i), acc0);
  __m256 acc = _mm256_add_ps(acc0, acc1);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  float r = _mm_cvtss_f32(s);
  for (; i < n; ++i) r += a[i] * Scalar(b[i]);
  return r;
}

template <__m256 (*Widen)(const uint16_t*), float (*Scalar)(uint16_t)>
void axpy_half_avx2(float* y, float a, const uint16_t* x, int n) {
  const __m256 av = _mm256_set1_ps(a);
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, Widen(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * Scalar(x[i]);
}

void silu_mul_avx2(const float* gate, const float* up, int n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = kernels::exp256(_mm256_xor_ps(g, sign));
    _mm256_storeu_ps(
        out + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + exp_poly(-gate[i])) * up[i];
}

void sigmoid_mul_avx2(float* x, const float* gate, int n) {
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = kernels::exp256(_mm256_xor_ps(_mm256_loadu_ps(gate + i), sign));
    _mm256_storeu_ps(
        x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_div_ps(one, _mm256_add_ps(one, e))));
  }
  for (; i < n; ++i) x[i] *= 1.0f / (1.0f + exp_poly(-gate[i]));
}

void gelu_mul_avx2(const float* gate, const float* up, int n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f), beta = _mm256_set1_ps(kGeluBeta),
               kappa = _mm256_set1_ps(kGeluKappa), minus_two = _mm256_set1_ps(-2.0f);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i);
    const __m256 x3k = _mm256_mul_ps(_mm256_mul_ps(kappa, x), x);
    const __m256 u = _mm256_mul_ps(beta, _mm256_fmadd_ps(x3k, x, x));
    const __m256 e = kernels::exp256(_mm256_mul_ps(minus_two, u));
    _mm256_storeu_ps(
        out + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = gelu_mul_one(gate[i], up[i]);
}

void clamped_swiglu_mul_avx2(const float* gate, const float* up, int n, float alpha, float limit,
                             float* out) {
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f), a = _mm256_set1_ps(alpha),
               hi = _mm256_set1_ps(limit), lo = _mm256_set1_ps(-limit);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    // MINPS / MAXPS return their second operand when either is NaN: the bound goes first, so
    // (limit < g) ? limit : g, as std::min(g, limit) is.
    const __m256 g = _mm256_min_ps(hi, _mm256_loadu_ps(gate + i));
    const __m256 u = _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_loadu_ps(up + i)));
    const __m256 e = kernels::exp256(_mm256_xor_ps(_mm256_mul_ps(a, g), sign));
    _mm256_storeu_ps(out + i,
                     _mm256_mul_ps(_mm256_add_ps(u, one), _mm256_div_ps(g, _mm256_add_ps(one, e))));
  }
  for (; i < n; ++i) out[i] = clamped_swiglu_one(gate[i], up[i], alpha, limit);
}

// Four accumulators of 4 doubles: lanes 0-15. Each product is exact in double, so the fma rounds
// once, as the scalar form's add does.
double sum_squares_avx2(const float* x, int n) {
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                    _mm256_setzero_pd()};
  int i = 0;
  for (; i + kSquareLanes <= n; i += kSquareLanes)
    for (int a = 0; a < 4; ++a) {
      const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4 * a));
      acc[a] = _mm256_fmadd_pd(v, v, acc[a]);
    }
  alignas(32) double lane[kSquareLanes];
  for (int a = 0; a < 4; ++a) _mm256_store_pd(lane + 4 * a, acc[a]);
  for (; i < n; ++i) lane[i % kSquareLanes] += double(x[i]) * double(x[i]);
  return sum_square_lanes(lane);
}

}  // namespace

const VecKernels& vec_kernels_avx2() {
  static const VecKernels k{dot_avx2,
                            axpy_avx2,
                            dot_half_avx2<widen_f16, f16_to_f32>,
                            axpy_half_avx2<widen_f16, f16_to_f32>,
                            dot_half_avx2<widen_bf16, bf16_to_f32>,
                            axpy_half_avx2<widen_bf16, bf16_to_f32>,
                            silu_mul_avx2,
                            gelu_mul_avx2,
                            sigmoid_mul_avx2,
                            clamped_swiglu_mul_avx2,
                            sum_squares_avx2,
                            "avx2"};
  return k;
}

}  // namespace fak
