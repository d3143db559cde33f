// The per-ISA matmul entry points behind ops/matmul.h's dispatch. Internal to ops/.
#pragma once

#include <cstdint>

#include "ops/matmul.h"
#include "ops/quant/quant.h"

namespace fak::kernels {

// Computes y[t][r] for t in [0, n_tokens), r in [r0, r1). x rows are w.cols long, y rows w.rows.
using MatmulRowsFn = void (*)(const WeightMatrix& w, const float* x, int n_tokens, float* y,
                              int64_t r0, int64_t r1);

void matmul_rows_ref(const WeightMatrix& w, const float* x, int n_tokens, float* y, int64_t r0,
                     int64_t r1);
void matmul_rows_avx2(const WeightMatrix& w, const float* x, int n_tokens, float* y, int64_t r0,
                      int64_t r1);

bool cpu_has_avx2();

// Block-quantised weights (matmul_quant.cpp): the activations already quantised, one row per token.
struct QuantTask {
  const WeightMatrix* w = nullptr;
  const uint8_t* act = nullptr;  // [n_tokens][act_row_bytes], Q8_0 or Q8_K
  size_t act_row_bytes = 0;
  int n_tokens = 0;
  // Q8_0 activations with n_tokens > 1: each block's fp16 scale as a float, [n_tokens][cols / 32]
  // (the prefill kernels would otherwise convert it once per 8 rows).
  const float* act_scales = nullptr;
  // q4_0 / q5_0 weights with n_tokens > 1: Σ of each activation block's quants, same layout.
  const int32_t* act_sums = nullptr;
  float* y = nullptr;  // [n_tokens][w->rows]
  VecDotFn dot = nullptr;
};
void matmul_quant(const WeightMatrix& w, const float* x, int n_tokens, float* y);

// Computes outputs of rows [r0, r1) for every token of q, bit-identical to q.dot per output.
using QuantTileFn = void (*)(const QuantTask& q, int64_t r0, int64_t r1);
// The register-tiled prefill kernel for t on this CPU, or null (rows are then done by vec_dot).
QuantTileFn quant_tile_kernel(QuantType t);
QuantTileFn quant_tile_avx2(QuantType t);  // gemm_avx2.cpp; only when cpu_has_avx2()
// The decode kernel (n_tokens == 1) for t on this CPU, or null (rows are then done by vec_dot).
QuantTileFn quant_gemv_kernel(QuantType t);
QuantTileFn quant_gemv_avx2(QuantType t);  // gemv_avx2.cpp; only when cpu_has_avx2()
// Test hook: forces vec_dot rows even where a tile or decode kernel exists (to compare them).
void set_quant_tiles_enabled(bool enabled);

}  // namespace fak::kernels
