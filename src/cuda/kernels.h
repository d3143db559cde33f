// The CUDA kernels of the forward pass, as host functions that launch them on `stream`. Every
// pointer is device memory; activations are f32 row-major [rows][width].
//
// note: like the CPU kernels (ops/matmul.h, ops/attention.h), each output element is computed by
// the same operations in the same order whatever the batch holds: a row's matmul is one warp's
// fixed-order reduction, a query's attention depends only on its own keys, norms reduce in a fixed
// tree. So a prefix-cache hit, a replay after eviction and a batched decode step reproduce a cold
// run on the device bit for bit (the device's bits, not the CPU's).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace fak::cuda {

// Empty when this build's kernels can run on the current device; else why not (a GPU whose compute
// capability the build has neither code nor PTX for).
std::string kernel_image_problem();

// Weight element types the device kernels read directly; others are widened to F32 at load.
enum class DevWType : uint8_t { F32, F16, BF16, Q8_0 };

struct DevMatrix {
  DevWType type = DevWType::F32;
  const void* data = nullptr;
  int rows = 0, cols = 0;
  size_t row_bytes = 0;
};

// y[t][r] = dot(W[r], x[t]) for t < n_tokens.
void matmul(const DevMatrix& w, const float* x, int n_tokens, float* y, cudaStream_t stream);

// out[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * weight, for `rows` rows of `width` (in place is
// fine). With row_index non-null, row r reads x row row_index[r].
void rmsnorm(const float* x, const float* weight, int rows, int width, float eps, float* out,
             const int32_t* row_index, cudaStream_t stream);

// x[t][i] += bias[i]
void add_bias(float* x, const float* bias, int rows, int width, cudaStream_t stream);
// x[i] += y[i]
void add_inplace(float* x, const float* y, size_t n, cudaStream_t stream);
// out[i] = silu(gate[i]) * up[i]
void silu_mul(const float* gate, const float* up, size_t n, float* out, cudaStream_t stream);

// Gated attention (Qwen3.5): q2 [n_tokens][n_heads][2 * head_dim] holds per head the query then
// the gate; they go to q and gate, each [n_tokens][n_heads][head_dim].
void split_gate(const float* q2, int n_tokens, int n_heads, int head_dim, float* q, float* gate,
                cudaStream_t stream);
// x[i] *= sigmoid(gate[i])
void sigmoid_mul(float* x, const float* gate, size_t n, cudaStream_t stream);
// x[i] *= silu(z[i])
void silu_gate(float* x, const float* z, size_t n, cudaStream_t stream);

// Throws naming `what` when the last launch failed (and, with FAK_CUDA_SYNC=1, when the kernel
// itself did).
void check_launch(const char* what);

// Rotates the first 2 * half dims of each of n_heads heads of every token (HF's rotate_half):
// x [n_tokens][n_heads][head_dim], cos/sin [n_tokens][half].
void rope(float* x, int n_tokens, int n_heads, int head_dim, int half, const float* cos,
          const float* sin, cudaStream_t stream);

// Where one attention layer's KV lives: the cache's slabs and its layout (memory/kv_cache.h).
struct KvLayout {
  uint8_t* const* slabs = nullptr;  // device array of slab base pointers
  int blocks_per_slab = 0, block_size = 0, n_kv_heads = 0, head_dim = 0, planes = 0;
  int elem_bytes = 4;  // 4 f32, 2 f16 or bf16 (is_bf16)
  bool is_bf16 = false;
  size_t head_bytes = 0, head_stride = 0;
};

// Per token of the batch: its position and where its sequence's block table starts in `tables`.
struct TokenPlaces {
  const int32_t* pos = nullptr;
  const int32_t* table_start = nullptr;
  const int32_t* tables = nullptr;  // every sequence's block table, concatenated
};

// Writes rows [n_tokens][n_kv_heads * head_dim] into plane `plane` (0 K, 1 V, 2 Kraw) of `layer`.
void kv_store(const KvLayout& kv, const TokenPlaces& places, int layer, int plane,
              const float* rows, int n_tokens, cudaStream_t stream);

// Causal GQA attention of q [n_tokens][n_heads][head_dim] over positions [0, pos[t]] of each
// token's sequence; out like q. head_dim <= 256.
void attention(const KvLayout& kv, const TokenPlaces& places, int layer, const float* q,
               int n_tokens, int n_heads, float scale, float* out, cudaStream_t stream);

}  // namespace fak::cuda
