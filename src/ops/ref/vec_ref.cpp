#include "core/dtype.h"
#include "ops/vec.h"

namespace fak {

namespace {
float dot_ref(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
void axpy_ref(float* y, float a, const float* x, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}
template <float (*Widen)(uint16_t)>
float dot_half_ref(const float* a, const uint16_t* b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += a[i] * Widen(b[i]);
  return s;
}
template <float (*Widen)(uint16_t)>
void axpy_half_ref(float* y, float a, const uint16_t* x, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * Widen(x[i]);
}
void silu_mul_ref(const float* gate, const float* up, int n, float* out) {
  for (int i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + exp_poly(-gate[i])) * up[i];
}
void gelu_mul_ref(const float* gate, const float* up, int n, float* out) {
  for (int i = 0; i < n; ++i) out[i] = gelu_mul_one(gate[i], up[i]);
}
void sigmoid_mul_ref(float* x, const float* gate, int n) {
  for (int i = 0; i < n; ++i) x[i] *= 1.0f / (1.0f + exp_poly(-gate[i]));
}
void clamped_swiglu_mul_ref(const float* gate, const float* up, int n, float alpha, float limit,
                            float* out) {
  for (int i = 0; i < n; ++i) out[i] = clamped_swiglu_one(gate[i], up[i], alpha, limit);
}
double sum_squares_ref(const float* x, int n) {
  double lane[kSquareLanes] = {};
  for (int i = 0; i < n; ++i) lane[i % kSquareLanes] += double(x[i]) * double(x[i]);
  return sum_square_lanes(lane);
}
}  // namespace

const VecKernels& vec_kernels_ref() {
  static const VecKernels k{dot_ref,
                            axpy_ref,
                            dot_half_ref<f16_to_f32>,
                            axpy_half_ref<f16_to_f32>,
                            dot_half_ref<bf16_to_f32>,
                            axpy_half_ref<bf16_to_f32>,
                            silu_mul_ref,
                            gelu_mul_ref,
                            sigmoid_mul_ref,
                            clamped_swiglu_mul_ref,
                            sum_squares_ref,
                            "scalar"};
  return k;
}

}  // namespace fak
