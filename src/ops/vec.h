// Small vector kernels used inside attention: dot products and axpy over f32 rows. Dispatched once
// to AVX2 when the CPU has it. Deterministic: a given (a, b, n) always sums in the same order.
#pragma once

#include <cstdint>

namespace fak {

struct VecKernels {
  float (*dot)(const float* a, const float* b, int n);
  void (*axpy)(float* y, float a, const float* x, int n);  // y += a * x
  // The same over rows stored as f16 / bf16 (KV cache storage), widened on the fly.
  float (*dot_f16)(const float* a, const uint16_t* b, int n);
  void (*axpy_f16)(float* y, float a, const uint16_t* x, int n);
  float (*dot_bf16)(const float* a, const uint16_t* b, int n);
  void (*axpy_bf16)(float* y, float a, const uint16_t* x, int n);
  const char* isa;
};

const VecKernels& vec_kernels();
const VecKernels& vec_kernels_ref();

}  // namespace fak
