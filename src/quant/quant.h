// Quantize / dequantize rows of ggml block formats and the int8 dot products that matrix-vector and
// matrix-matrix products are built from. A weight row of type T is dotted with an activation row
// quantized to dot_activation_type(T) (Q8_0 or Q8_K) of the same length:
//
//   std::vector<uint8_t> act(row_bytes(QuantType::Q8_K, n));
//   const QuantKernels& k = quant_kernels();
//   k.quantize_act(QuantType::Q8_K)(x, act.data(), n);
//   float y = k.vec_dot(QuantType::Q4_K)(n, w_row, act.data());
//
// Kernels are chosen once per process by CPU features; tests and benches get every variant through
// quant_kernel_variants().
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "quant/quant_type.h"

namespace fak {

// n is the number of elements and must be a multiple of quant_block_size(t) (callers check with
// row_bytes, which throws); pointers need no alignment.
void quantize_row(QuantType t, const float* x, void* y, int64_t n);
void dequantize_row(QuantType t, const void* x, float* y, int64_t n);

using VecDotFn = float (*)(int64_t n, const void* w_row, const void* act);
using QuantizeRowFn = void (*)(const float* x, void* y, int64_t n);
// The (scale, min) fits of one q4_K / q5_K super-block's 8 sub-blocks, codes in [0, nmax]
// (quantize_k_ref.cpp says how): the search most of a K-quant conversion spends its time in.
using FitK4Fn = void (*)(const float* x, int nmax, uint8_t* codes, float* scales, float* mins);
// The 16 sub-block scales of one q6_K super-block (before they are quantized to 8 bits).
using FitQ6KFn = void (*)(const float* x, float* scales);

struct QuantKernels {
  std::string_view isa;                          // "scalar", "avx2"
  std::array<VecDotFn, kQuantTypeIdLimit> dots;  // by ggml type id; null for ids that are no type
  QuantizeRowFn quantize_q8_0;                   // activation quantizers, exact same output as the
  QuantizeRowFn quantize_q8_k;                   // scalar reference in every variant
  FitK4Fn fit_k4;                                // weight quantizing: the same output everywhere
  FitQ6KFn fit_q6_k;

  VecDotFn vec_dot(QuantType t) const { return dots[uint32_t(t)]; }
  QuantizeRowFn quantize_act(QuantType act) const {
    return act == QuantType::Q8_K ? quantize_q8_k : quantize_q8_0;
  }
};

// The fastest variant this CPU runs; chosen on first call and the same for the process' lifetime.
const QuantKernels& quant_kernels();

struct QuantKernelVariant {
  const QuantKernels* kernels;
  bool supported;  // false when this CPU lacks the ISA: callers must not run it
};
// Every compiled variant, scalar first.
std::span<const QuantKernelVariant> quant_kernel_variants();

namespace quant {
// Scalar references, the readable spec every SIMD variant is tested against.
const QuantKernels& scalar_kernels();
}  // namespace quant

}  // namespace fak
