// The CUDA kernels of a sparse MoE block (the CPU's are in backend/cpu_backend.cpp: each op says
// what it computes). Every output row reads only its own inputs, in a fixed order: a token's
// routing, its experts' rows and their sum in rank order do not depend on what else the batch
// holds.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace fak::cuda {

// Per token: softmax over logits [T][n_experts], the k most probable experts (ties to the lower
// id) into ids [T][k] and their probabilities (renormalised to sum 1 with `renorm`) into weights.
void moe_route(const float* logits, int n_tokens, int n_experts, int k, bool renorm, int32_t* ids,
               float* weights, cudaStream_t stream);

// dst[r] = src[index[r] / divisor] for n rows of `width`.
void gather_rows(const float* src, const int32_t* index, int divisor, int n, int width, float* dst,
                 cudaStream_t stream);
// out[t] = sum over j < k, in order, of weights[t][j] * rows[row_of[t k + j]], rows of `width`.
void moe_combine(const float* rows, const int32_t* row_of, const float* weights, int n_tokens,
                 int k, int width, float* out, cudaStream_t stream);
// out[t] += sigmoid(gate[t]) * y[t], rows of `width`.
void add_gated(float* out, const float* y, const float* gate, int n_tokens, int width,
               cudaStream_t stream);

}  // namespace fak::cuda
