// Small vector kernels used inside attention: dot products and axpy over f32 rows. Dispatched once
// to AVX2 when the CPU has it. Deterministic: a given (a, b, n) always sums in the same order.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace fak {

struct VecKernels {
  float (*dot)(const float* a, const float* b, int n);
  void (*axpy)(float* y, float a, const float* x, int n);  // y += a * x
  // The same over rows stored as f16 / bf16 (KV cache storage), widened on the fly.
  float (*dot_f16)(const float* a, const uint16_t* b, int n);
  void (*axpy_f16)(float* y, float a, const uint16_t* x, int n);
  float (*dot_bf16)(const float* a, const uint16_t* b, int n);
  void (*axpy_bf16)(float* y, float a, const uint16_t* x, int n);
  // out[i] = gate[i] / (1 + exp_poly(-gate[i])) * up[i]; every variant gives the same bits.
  void (*silu_mul)(const float* gate, const float* up, int n, float* out);
  // out[i] = gelu_tanh(gate[i]) * up[i] (GeGLU), as x sigma(2u) = x / (1 + exp_poly(-2u)) with
  // u = sqrt(2 / pi) (x + 0.044715 x^3): PyTorch's tanh GELU (1 + tanh(u) = 2 sigma(2u)) through
  // the same exp as SiLU; every variant gives the same bits.
  void (*gelu_mul)(const float* gate, const float* up, int n, float* out);
  // x[i] *= 1 / (1 + exp_poly(-gate[i])): PyTorch's x * sigmoid(gate) with the same exp as SiLU;
  // every variant gives the same bits.
  void (*sigmoid_mul)(float* x, const float* gate, int n);
  // gpt-oss's clamped SwiGLU: g = min(gate[i], limit), u = clamp(up[i], -limit, limit),
  // out[i] = (u + 1) * (g / (1 + exp_poly(-alpha g))); every variant gives the same bits.
  void (*clamped_swiglu_mul)(const float* gate, const float* up, int n, float alpha, float limit,
                             float* out);
  // Σ x[i]² in double (RMSNorm's sum), in kSquareLanes lanes, element i into lane i % 16 in order,
  // then the lanes added as sum_square_lanes does; every variant gives the same bits. (One chain
  // of double adds cost 4 cycles an element: 3% of a prefill.)
  double (*sum_squares)(const float* x, int n);
  const char* isa;
};

// exp(x) to ~2e-7 relative: Cody-Waite reduction, a degree-6 polynomial, 2^n from the exponent
// bits; exactly 0 below -87.33, finite up to 88.37 (clamped). The vector kernels run the same
// operations per lane, so this scalar form is their reference and their tail, bit for bit.
inline float exp_poly(float x) {
  const bool underflow = x < -87.33f;
  x = x > -87.33f ? x : -87.33f;
  x = x < 88.37f ? x : 88.37f;
  const float n = std::rint(x * 1.44269504088896341f);  // ties to even, inline (not libm)
  float r = std::fma(-n, 0.693359375f, x);
  r = std::fma(-n, -2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  p = std::fma(p, r * r, r + 1.0f);
  const uint32_t bits = uint32_t(int32_t(n) + 127) << 23;
  float e;
  std::memcpy(&e, &bits, sizeof e);
  return underflow ? 0.0f : p * e;
}

// The GELU argument's constants, as PyTorch's kernel writes them.
inline constexpr float kGeluBeta = 0.7978845608028654f;  // sqrt(2 / pi)
inline constexpr float kGeluKappa = 0.044715f;

// One element of gelu_mul, in the exact operations the vector kernels do per lane (explicit fma,
// no product left for a compiler to contract with an add).
inline float gelu_mul_one(float x, float up) {
  const float x3k = kGeluKappa * x * x;
  const float u = kGeluBeta * std::fma(x3k, x, x);
  return x / (1.0f + exp_poly(-2.0f * u)) * up;
}

// One element of clamped_swiglu_mul, in the vector kernels' operations and order (std::min and
// std::clamp as MINPS / MAXPS with the bound first: a NaN input passes through, as in them).
inline float clamped_swiglu_one(float gate, float up, float alpha, float limit) {
  const float g = std::min(gate, limit);
  const float u = std::clamp(up, -limit, limit);
  return (u + 1.0f) * (g / (1.0f + exp_poly(-(alpha * g))));
}

inline constexpr int kSquareLanes = 16;

// The lanes of sum_squares as one number: lanes k, k + 4, k + 8, k + 12 as (a + b) + (c + d) (four
// 4-wide accumulators added pairwise), then those four as (s0 + s2) + (s1 + s3).
inline double sum_square_lanes(const double* lane) {
  double s[4];
  for (int k = 0; k < 4; ++k) s[k] = (lane[k] + lane[4 + k]) + (lane[8 + k] + lane[12 + k]);
  return (s[0] + s[2]) + (s[1] + s[3]);
}

const VecKernels& vec_kernels();
const VecKernels& vec_kernels_ref();

}  // namespace fak
