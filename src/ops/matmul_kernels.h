// The per-ISA matmul entry points behind ops/matmul.h's dispatch. Internal to ops/.
#pragma once

#include <cstdint>

#include "ops/matmul.h"

namespace fak::kernels {

// Computes y[t][r] for t in [0, n_tokens), r in [r0, r1). x rows are w.cols long, y rows w.rows.
using MatmulRowsFn = void (*)(const WeightMatrix& w, const float* x, int n_tokens, float* y,
                              int64_t r0, int64_t r1);

void matmul_rows_ref(const WeightMatrix& w, const float* x, int n_tokens, float* y, int64_t r0,
                     int64_t r1);
void matmul_rows_avx2(const WeightMatrix& w, const float* x, int n_tokens, float* y, int64_t r0,
                      int64_t r1);

bool cpu_has_avx2();

}  // namespace fak::kernels
