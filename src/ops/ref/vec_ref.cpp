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
}  // namespace

const VecKernels& vec_kernels_ref() {
  static const VecKernels k{dot_ref, axpy_ref, "scalar"};
  return k;
}

}  // namespace fak
