// Declarations shared between the quant kernel files and the dispatcher; not a public header.
#pragma once

#include <cstdint>

#include "quant/quant.h"

namespace fak::quant {

// Scalar references (quantize_ref.cpp, quantize_k_ref.cpp, dot_ref.cpp).
void quantize_q4_0_ref(const float* x, void* y, int64_t n);
void quantize_q4_1_ref(const float* x, void* y, int64_t n);
void quantize_q5_0_ref(const float* x, void* y, int64_t n);
void quantize_q5_1_ref(const float* x, void* y, int64_t n);
void quantize_q8_0_ref(const float* x, void* y, int64_t n);
void quantize_q4_k_ref(const float* x, void* y, int64_t n);
void quantize_q5_k_ref(const float* x, void* y, int64_t n);
// The same with the sub-block fits of a kernel variant (QuantKernels::fit_k4).
void quantize_q4_k(const float* x, void* y, int64_t n, FitK4Fn fit);
void quantize_q5_k(const float* x, void* y, int64_t n, FitK4Fn fit);
void quantize_q6_k(const float* x, void* y, int64_t n, FitQ6KFn fit);
void fit_k4_super_block_ref(const float* x, int nmax, uint8_t* codes, float* scales, float* mins);
void fit_q6_k_scales_ref(const float* x, float* scales);
void quantize_q6_k_ref(const float* x, void* y, int64_t n);
void quantize_q8_k_ref(const float* x, void* y, int64_t n);
void quantize_mxfp4_ref(const float* x, void* y, int64_t n);
// quantize_lowbit_ref.cpp: llama-quantize's importance-free quantisers.
void quantize_q2_k_ref(const float* x, void* y, int64_t n);
void quantize_q3_k_ref(const float* x, void* y, int64_t n);
void quantize_iq4_nl_ref(const float* x, void* y, int64_t n);
void quantize_iq4_xs_ref(const float* x, void* y, int64_t n);

void dequantize_q4_0_ref(const void* x, float* y, int64_t n);
void dequantize_q4_1_ref(const void* x, float* y, int64_t n);
void dequantize_q5_0_ref(const void* x, float* y, int64_t n);
void dequantize_q5_1_ref(const void* x, float* y, int64_t n);
void dequantize_q8_0_ref(const void* x, float* y, int64_t n);
void dequantize_q4_k_ref(const void* x, float* y, int64_t n);
void dequantize_q5_k_ref(const void* x, float* y, int64_t n);
void dequantize_q6_k_ref(const void* x, float* y, int64_t n);
void dequantize_q8_k_ref(const void* x, float* y, int64_t n);
void dequantize_mxfp4_ref(const void* x, float* y, int64_t n);
void dequantize_q2_k_ref(const void* x, float* y, int64_t n);
void dequantize_q3_k_ref(const void* x, float* y, int64_t n);
void dequantize_iq4_nl_ref(const void* x, float* y, int64_t n);
void dequantize_iq4_xs_ref(const void* x, float* y, int64_t n);

// The low-bit types' dots (q2_K, q3_K, iq4_nl, iq4_xs) set into a kernel table: the scalar
// references (dot_lowbit_ref.cpp) and the AVX2 ones (dot_lowbit_avx2.cpp).
void set_lowbit_dots_ref(QuantKernels& k);
void set_lowbit_dots_avx2(QuantKernels& k);

// AVX2 variant (dot_avx2.cpp, quantize_avx2.cpp); only called when the CPU has AVX2+FMA+F16C.
const QuantKernels& avx2_kernels();
void quantize_q8_0_avx2(const float* x, void* y, int64_t n);
void quantize_q8_k_avx2(const float* x, void* y, int64_t n);
void fit_k4_super_block_avx2(const float* x, int nmax, uint8_t* codes, float* scales, float* mins);
void fit_q6_k_scales_avx2(const float* x, float* scales);

}  // namespace fak::quant
