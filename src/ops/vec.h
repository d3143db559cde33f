// Small vector kernels used inside attention: dot products and axpy over f32 rows. Dispatched once
// to AVX2 when the CPU has it. Deterministic: a given (a, b, n) always sums in the same order.
#pragma once

namespace fak {

struct VecKernels {
  float (*dot)(const float* a, const float* b, int n);
  void (*axpy)(float* y, float a, const float* x, int n);  // y += a * x
  const char* isa;
};

const VecKernels& vec_kernels();
const VecKernels& vec_kernels_ref();

}  // namespace fak
