// Sparse MoE on the device (see moe_kernels.h).
#include <algorithm>
#include <cmath>

#include "cuda/kernels.h"
#include "cuda/moe_kernels.h"

namespace fak::cuda {

namespace {

int blocks_for(size_t n) {
  return int(std::min<size_t>((n + 255) / 256, 65535));
}

// One thread per token: its routing is a short serial loop over the experts (a few hundred),
// the same operations as the CPU's (ops in backend/cpu_backend.cpp route_token).
__global__ void route_kernel(const float* logits, int n_tokens, int n, int k, bool renorm,
                             int32_t* ids, float* weights) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n_tokens) return;
  const float* l = logits + size_t(t) * size_t(n);
  int32_t* id = ids + size_t(t) * size_t(k);
  float* w = weights + size_t(t) * size_t(k);
  float max = l[0];
  for (int e = 1; e < n; ++e) max = fmaxf(max, l[e]);
  double sum = 0;
  for (int e = 0; e < n; ++e) sum += double(expf(l[e] - max));
  const float inv = float(1.0 / sum);
  for (int j = 0; j < k; ++j) {
    int best = -1;
    float best_p = 0.0f;
    for (int e = 0; e < n; ++e) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken |= id[i] == e;
      const float p = __fmul_rn(expf(l[e] - max), inv);
      if (!taken && (best < 0 || p > best_p)) {
        best = e;
        best_p = p;
      }
    }
    id[j] = best;
    w[j] = best_p;
  }
  if (renorm) {
    float s = 0.0f;
    for (int j = 0; j < k; ++j) s = __fadd_rn(s, w[j]);
    for (int j = 0; j < k; ++j) w[j] = __fdiv_rn(w[j], s);
  }
}

__global__ void gather_kernel(const float* src, const int32_t* index, int divisor, int width,
                              size_t n, float* dst) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t r = i / size_t(width), d = i % size_t(width);
    dst[i] = src[size_t(index[r] / divisor) * size_t(width) + d];
  }
}

__global__ void combine_kernel(const float* rows, const int32_t* row_of, const float* weights,
                               int k, int width, size_t n, float* out) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t t = i / size_t(width), d = i % size_t(width);
    float acc = 0.0f;
    for (int j = 0; j < k; ++j)
      acc = __fadd_rn(
          acc, __fmul_rn(weights[t * size_t(k) + size_t(j)],
                         rows[size_t(row_of[t * size_t(k) + size_t(j)]) * size_t(width) + d]));
    out[i] = acc;
  }
}

__global__ void add_gated_kernel(float* out, const float* y, const float* gate, int width,
                                 size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float s = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-gate[i / size_t(width)])));
    out[i] = __fadd_rn(out[i], __fmul_rn(s, y[i]));
  }
}

}  // namespace

void moe_route(const float* logits, int n_tokens, int n_experts, int k, bool renorm, int32_t* ids,
               float* weights, cudaStream_t stream) {
  if (n_tokens <= 0) return;
  route_kernel<<<(n_tokens + 63) / 64, 64, 0, stream>>>(logits, n_tokens, n_experts, k, renorm, ids,
                                                        weights);
  check_launch("moe_route kernel");
}

void gather_rows(const float* src, const int32_t* index, int divisor, int n, int width, float* dst,
                 cudaStream_t stream) {
  const size_t total = size_t(n) * size_t(width);
  if (total == 0) return;
  gather_kernel<<<blocks_for(total), 256, 0, stream>>>(src, index, divisor, width, total, dst);
  check_launch("gather_rows kernel");
}

void moe_combine(const float* rows, const int32_t* row_of, const float* weights, int n_tokens,
                 int k, int width, float* out, cudaStream_t stream) {
  const size_t total = size_t(n_tokens) * size_t(width);
  if (total == 0) return;
  combine_kernel<<<blocks_for(total), 256, 0, stream>>>(rows, row_of, weights, k, width, total,
                                                        out);
  check_launch("moe_combine kernel");
}

void add_gated(float* out, const float* y, const float* gate, int n_tokens, int width,
               cudaStream_t stream) {
  const size_t total = size_t(n_tokens) * size_t(width);
  if (total == 0) return;
  add_gated_kernel<<<blocks_for(total), 256, 0, stream>>>(out, y, gate, width, total);
  check_launch("add_gated kernel");
}

}  // namespace fak::cuda
