// The forward pass's CUDA kernels (see kernels.h for what each computes and the batch-invariance
// rule they keep). Written for correctness and determinism first: one warp per output row of a
// matmul, one block per (query, head) of attention; the fused tensor-core and split-K variants
// come later, each checked against these.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "cuda/cuda_device.h"
#include "cuda/kernels.h"

namespace fak::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kTokenTile = 8;     // tokens per matmul block: each weight row read once per 8
constexpr int kRowsPerBlock = 4;  // warps (= rows) per matmul block
constexpr int kNormThreads = 256;
constexpr int kAttnThreads = 256;  // also the key tile and the largest head_dim

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <DevWType kType>
__device__ __forceinline__ float weight_at(const uint8_t* row, int k) {
  if constexpr (kType == DevWType::F32) return reinterpret_cast<const float*>(row)[k];
  if constexpr (kType == DevWType::F16)
    return __half2float(reinterpret_cast<const __half*>(row)[k]);
  return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(row)[k]);
}

// Eight 16-bit weights from one 16-byte load.
template <DevWType kType>
__device__ __forceinline__ void widen8(const uint4& raw, float* w) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    if constexpr (kType == DevWType::F16)
      w[j] = __half2float(__ushort_as_half(h[j]));
    else
      w[j] = __bfloat162float(__ushort_as_bfloat16(h[j]));
  }
}

// One warp per weight row, kTokenTile tokens per block. Each lane sums a fixed subset of the row
// in a fixed order, then the warp reduces: the same operations for a token wherever it sits in
// the batch. `vector8`: 16-bit rows read 8 elements per load (cols % 8 == 0; chosen from the
// shape alone, so still the same for every batch).
template <DevWType kType, bool kVector8>
__global__ void matmul_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int rows, int cols,
                              const float* __restrict__ x, int n_tokens, float* __restrict__ y) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int r = blockIdx.x * kRowsPerBlock + warp;
  if (r >= rows) return;  // the whole warp leaves together
  const int t0 = blockIdx.y * kTokenTile;
  const int nt = min(kTokenTile, n_tokens - t0);
  const uint8_t* wr = w + size_t(r) * row_bytes;
  const float* xt = x + size_t(t0) * size_t(cols);
  float acc[kTokenTile];
#pragma unroll
  for (int i = 0; i < kTokenTile; ++i) acc[i] = 0.0f;

  if constexpr (kType == DevWType::Q8_0) {
    // Blocks of 32: an f16 scale, then 32 int8 (34 bytes; 2-byte aligned).
    const int nb = cols / 32;
    for (int b = lane; b < nb; b += kWarp) {
      const uint8_t* blk = wr + size_t(b) * 34;
      const float d = __half2float(*reinterpret_cast<const __half*>(blk));
      const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
      float wv[32];
#pragma unroll
      for (int j = 0; j < 32; ++j) wv[j] = float(q[j]);
#pragma unroll
      for (int i = 0; i < kTokenTile; ++i) {
        if (i < nt) {
          const float* xi = xt + size_t(i) * size_t(cols) + size_t(b) * 32;
          float s = 0.0f;
#pragma unroll
          for (int j = 0; j < 32; ++j) s += wv[j] * xi[j];
          acc[i] += s * d;
        }
      }
    }
  } else if constexpr (kVector8) {
    const int n8 = cols / 8;
    for (int c = lane; c < n8; c += kWarp) {
      float wv[8];
      widen8<kType>(reinterpret_cast<const uint4*>(wr)[c], wv);
#pragma unroll
      for (int i = 0; i < kTokenTile; ++i) {
        if (i < nt) {
          const float4* xi = reinterpret_cast<const float4*>(xt + size_t(i) * size_t(cols)) + 2 * c;
          const float4 a = xi[0], b = xi[1];
          acc[i] += wv[0] * a.x + wv[1] * a.y + wv[2] * a.z + wv[3] * a.w + wv[4] * b.x +
                    wv[5] * b.y + wv[6] * b.z + wv[7] * b.w;
        }
      }
    }
  } else {
    for (int k = lane; k < cols; k += kWarp) {
      const float wk = weight_at<kType>(wr, k);
#pragma unroll
      for (int i = 0; i < kTokenTile; ++i)
        if (i < nt) acc[i] += wk * xt[size_t(i) * size_t(cols) + size_t(k)];
    }
  }
#pragma unroll
  for (int i = 0; i < kTokenTile; ++i) {
    const float s = warp_sum(acc[i]);  // every lane takes part, whatever nt is
    if (lane == 0 && i < nt) y[size_t(t0 + i) * size_t(rows) + size_t(r)] = s;
  }
}

__global__ void rmsnorm_kernel(const float* x, const float* weight, int width, float eps,
                               float* out, const int32_t* row_index) {
  const int r = blockIdx.x;
  const int src = row_index ? row_index[r] : r;
  const float* xr = x + size_t(src) * size_t(width);
  float* yr = out + size_t(r) * size_t(width);
  __shared__ double part[kNormThreads];
  double ss = 0.0;
  for (int i = threadIdx.x; i < width; i += kNormThreads) ss += double(xr[i]) * double(xr[i]);
  part[threadIdx.x] = ss;
  __syncthreads();
  for (int s = kNormThreads / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  const float scale = float(1.0 / sqrt(part[0] / double(width) + double(eps)));
  for (int i = threadIdx.x; i < width; i += kNormThreads) {
    const float v = __fmul_rn(xr[i], scale);
    yr[i] = weight ? __fmul_rn(v, weight[i]) : v;
  }
}

__global__ void add_bias_kernel(float* x, const float* bias, int rows, int width) {
  const size_t n = size_t(rows) * size_t(width);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    x[i] = __fadd_rn(x[i], bias[i % size_t(width)]);
}

__global__ void add_kernel(float* x, const float* y, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    x[i] = __fadd_rn(x[i], y[i]);
}

__global__ void silu_mul_kernel(const float* gate, const float* up, size_t n, float* out) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), up[i]);
  }
}

__global__ void rope_kernel(float* x, int n_heads, int head_dim, int half, const float* cos,
                            const float* sin) {
  const int t = blockIdx.x, h = blockIdx.y;
  float* v = x + (size_t(t) * size_t(n_heads) + size_t(h)) * size_t(head_dim);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float c = cos[size_t(t) * size_t(half) + size_t(i)];
    const float s = sin[size_t(t) * size_t(half) + size_t(i)];
    const float a = v[i], b = v[i + half];
    // No fused multiply-adds: the CPU reference rotates with separate roundings.
    v[i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    v[i + half] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
  }
}

// Head `head` of row `pos` of plane `plane` in `layer` (KvCache::row_offset's arithmetic).
__device__ __forceinline__ uint8_t* kv_row(const KvLayout& kv, const int32_t* table, int layer,
                                           int plane, int head, int pos) {
  const int32_t block = table[pos / kv.block_size];
  const size_t region = size_t(kv.n_kv_heads) * kv.head_stride;
  return kv.slabs[block / kv.blocks_per_slab] +
         (size_t(layer) * size_t(kv.planes) + size_t(plane)) * region +
         size_t(head) * kv.head_stride +
         (size_t(block % kv.blocks_per_slab) * size_t(kv.block_size) +
          size_t(pos % kv.block_size)) *
             kv.head_bytes;
}

__device__ __forceinline__ float kv_load(const KvLayout& kv, const uint8_t* row, int i) {
  if (kv.elem_bytes == 4) return reinterpret_cast<const float*>(row)[i];
  if (kv.is_bf16) return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(row)[i]);
  return __half2float(reinterpret_cast<const __half*>(row)[i]);
}

__global__ void kv_store_kernel(KvLayout kv, TokenPlaces places, int layer, int plane,
                                const float* rows) {
  const int t = blockIdx.x, h = blockIdx.y;
  uint8_t* row = kv_row(kv, places.tables + places.table_start[t], layer, plane, h, places.pos[t]);
  const float* src = rows + (size_t(t) * size_t(kv.n_kv_heads) + size_t(h)) * size_t(kv.head_dim);
  for (int d = threadIdx.x; d < kv.head_dim; d += blockDim.x) {
    if (kv.elem_bytes == 4)
      reinterpret_cast<float*>(row)[d] = src[d];
    else if (kv.is_bf16)
      reinterpret_cast<__nv_bfloat16*>(row)[d] = __float2bfloat16_rn(src[d]);
    else
      reinterpret_cast<__half*>(row)[d] = __float2half_rn(src[d]);
  }
}

// One block per (query token, head); keys in tiles of kAttnThreads with an online softmax. Thread
// j of a tile scores key j0 + j; thread d < head_dim owns output dim d. Tiles start at multiples
// of kAttnThreads from position 0, so a query's reduction order depends on its position only.
__global__ void attention_kernel(KvLayout kv, TokenPlaces places, int layer, const float* q,
                                 int n_heads, float scale, float* out) {
  const int t = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const int hd = kv.head_dim;
  const int kvh = h / (n_heads / kv.n_kv_heads);
  __shared__ float qs[kAttnThreads];
  __shared__ float p[kAttnThreads];
  __shared__ float red[kAttnThreads];
  __shared__ const uint8_t* vrows[kAttnThreads];  // the tile's V rows, found once per key
  const float* qh = q + (size_t(t) * size_t(n_heads) + size_t(h)) * size_t(hd);
  if (tid < hd) qs[tid] = qh[tid];
  __syncthreads();
  const int n_keys = places.pos[t] + 1;
  const int32_t* table = places.tables + places.table_start[t];
  float m = -INFINITY, l = 0.0f, acc = 0.0f;
  for (int j0 = 0; j0 < n_keys; j0 += kAttnThreads) {
    const int j = j0 + tid;
    float s = -INFINITY;
    if (j < n_keys) {
      vrows[tid] = kv_row(kv, table, layer, 1, kvh, j);
      const uint8_t* krow = kv_row(kv, table, layer, 0, kvh, j);
      float dot = 0.0f;
      for (int d = 0; d < hd; ++d) dot += qs[d] * kv_load(kv, krow, d);
      s = dot * scale;
    }
    red[tid] = s;
    __syncthreads();
    for (int w = kAttnThreads / 2; w > 0; w >>= 1) {
      if (tid < w) red[tid] = fmaxf(red[tid], red[tid + w]);
      __syncthreads();
    }
    const float m_new = fmaxf(m, red[0]);  // finite: the tile holds at least one key
    __syncthreads();
    const float pj = j < n_keys ? expf(s - m_new) : 0.0f;
    p[tid] = pj;
    red[tid] = pj;
    __syncthreads();
    for (int w = kAttnThreads / 2; w > 0; w >>= 1) {
      if (tid < w) red[tid] += red[tid + w];
      __syncthreads();
    }
    const float corr = expf(m - m_new);  // 0 on the first tile (m = -inf)
    l = l * corr + red[0];
    if (tid < hd) {
      const int n = min(kAttnThreads, n_keys - j0);
      float a = 0.0f;
      for (int jj = 0; jj < n; ++jj) a += p[jj] * kv_load(kv, vrows[jj], tid);
      acc = acc * corr + a;
    }
    m = m_new;
    __syncthreads();  // p and red are rewritten by the next tile
  }
  if (tid < hd) out[(size_t(t) * size_t(n_heads) + size_t(h)) * size_t(hd) + size_t(tid)] = acc / l;
}

// q_proj rows of a gated-attention layer, per head [query (head_dim) | gate (head_dim)], into the
// query rows and the gate rows apart.
__global__ void split_gate_kernel(const float* q2, int n_heads, int head_dim, float* q, float* gate,
                                  size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t d = i % size_t(head_dim), th = i / size_t(head_dim);  // (token, head)
    const float* src = q2 + th * 2 * size_t(head_dim);
    q[i] = src[d];
    gate[i] = src[size_t(head_dim) + d];
  }
}

// x *= sigmoid(gate) (sigmoid: 1 / (1 + exp(-g)), as the CPU forward writes it).
__global__ void sigmoid_mul_kernel(float* x, const float* gate, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    x[i] = __fmul_rn(x[i], __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-gate[i]))));
}

// x *= silu(z)
__global__ void silu_gate_kernel(float* x, const float* z, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float g = z[i];
    x[i] = __fmul_rn(x[i], __fdiv_rn(g, __fadd_rn(1.0f, expf(-g))));
  }
}

int elementwise_blocks(size_t n) {
  return int(std::min<size_t>((n + 255) / 256, 65535));
}

template <DevWType kType>
void launch_matmul(const DevMatrix& w, const float* x, int n_tokens, float* y, cudaStream_t stream,
                   bool vector8) {
  const dim3 grid((w.rows + kRowsPerBlock - 1) / kRowsPerBlock,
                  (n_tokens + kTokenTile - 1) / kTokenTile);
  const dim3 block(kRowsPerBlock * kWarp);
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  if (vector8)
    matmul_kernel<kType, true>
        <<<grid, block, 0, stream>>>(bytes, w.row_bytes, w.rows, w.cols, x, n_tokens, y);
  else
    matmul_kernel<kType, false>
        <<<grid, block, 0, stream>>>(bytes, w.row_bytes, w.rows, w.cols, x, n_tokens, y);
}

}  // namespace

// FAK_CUDA_SYNC=1: wait for every kernel, so an asynchronous fault (an illegal address) is blamed
// on the kernel that made it, not on the next copy. For bring-up and debugging; slow.
const bool kSyncEveryLaunch = [] {
  const char* v = std::getenv("FAK_CUDA_SYNC");
  return v && *v && *v != '0';
}();

void check_launch(const char* what) {
  cuda_check(cudaGetLastError(), what);
  if (kSyncEveryLaunch) cuda_check(cudaDeviceSynchronize(), what);
}

void matmul(const DevMatrix& w, const float* x, int n_tokens, float* y, cudaStream_t stream) {
  if (n_tokens <= 0 || w.rows <= 0) return;
  const bool vector8 = w.cols % 8 == 0;
  // gridDim.y is at most 65535 tiles; chunks are whole tiles, so no token changes tile position.
  constexpr int kChunk = 65535 * kTokenTile;
  for (int t0 = 0; t0 < n_tokens; t0 += kChunk) {
    const int n = std::min(kChunk, n_tokens - t0);
    const float* xc = x + size_t(t0) * size_t(w.cols);
    float* yc = y + size_t(t0) * size_t(w.rows);
    switch (w.type) {
      case DevWType::F32:
        launch_matmul<DevWType::F32>(w, xc, n, yc, stream, false);
        break;
      case DevWType::F16:
        launch_matmul<DevWType::F16>(w, xc, n, yc, stream, vector8);
        break;
      case DevWType::BF16:
        launch_matmul<DevWType::BF16>(w, xc, n, yc, stream, vector8);
        break;
      case DevWType::Q8_0:
        launch_matmul<DevWType::Q8_0>(w, xc, n, yc, stream, false);
        break;
    }
    check_launch("matmul kernel");
  }
}

std::string kernel_image_problem() {
  cudaFuncAttributes attributes{};
  const cudaError_t status = cudaFuncGetAttributes(&attributes, add_kernel);
  if (status == cudaSuccess) return "";
  cudaGetLastError();
  return std::string("this fak's CUDA kernels do not run on this GPU (") +
         cudaGetErrorString(status) +
         "); rebuild with -DCMAKE_CUDA_ARCHITECTURES set to its compute capability";
}

void rmsnorm(const float* x, const float* weight, int rows, int width, float eps, float* out,
             const int32_t* row_index, cudaStream_t stream) {
  if (rows <= 0) return;
  rmsnorm_kernel<<<rows, kNormThreads, 0, stream>>>(x, weight, width, eps, out, row_index);
  check_launch("rmsnorm kernel");
}

void add_bias(float* x, const float* bias, int rows, int width, cudaStream_t stream) {
  const size_t n = size_t(rows) * size_t(width);
  if (n == 0) return;
  add_bias_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(x, bias, rows, width);
  check_launch("add_bias kernel");
}

void add_inplace(float* x, const float* y, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(x, y, n);
  check_launch("add kernel");
}

void silu_mul(const float* gate, const float* up, size_t n, float* out, cudaStream_t stream) {
  if (n == 0) return;
  silu_mul_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(gate, up, n, out);
  check_launch("silu_mul kernel");
}

void split_gate(const float* q2, int n_tokens, int n_heads, int head_dim, float* q, float* gate,
                cudaStream_t stream) {
  const size_t n = size_t(n_tokens) * size_t(n_heads) * size_t(head_dim);
  if (n == 0) return;
  split_gate_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(q2, n_heads, head_dim, q, gate, n);
  check_launch("split_gate kernel");
}

void sigmoid_mul(float* x, const float* gate, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  sigmoid_mul_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(x, gate, n);
  check_launch("sigmoid_mul kernel");
}

void silu_gate(float* x, const float* z, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  silu_gate_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(x, z, n);
  check_launch("silu_gate kernel");
}

void rope(float* x, int n_tokens, int n_heads, int head_dim, int half, const float* cos,
          const float* sin, cudaStream_t stream) {
  if (n_tokens <= 0 || half <= 0) return;
  rope_kernel<<<dim3(n_tokens, n_heads), 64, 0, stream>>>(x, n_heads, head_dim, half, cos, sin);
  check_launch("rope kernel");
}

void kv_store(const KvLayout& kv, const TokenPlaces& places, int layer, int plane,
              const float* rows, int n_tokens, cudaStream_t stream) {
  if (n_tokens <= 0) return;
  kv_store_kernel<<<dim3(n_tokens, kv.n_kv_heads), 64, 0, stream>>>(kv, places, layer, plane, rows);
  check_launch("kv_store kernel");
}

void attention(const KvLayout& kv, const TokenPlaces& places, int layer, const float* q,
               int n_tokens, int n_heads, float scale, float* out, cudaStream_t stream) {
  if (n_tokens <= 0) return;
  attention_kernel<<<dim3(n_tokens, n_heads), kAttnThreads, 0, stream>>>(kv, places, layer, q,
                                                                         n_heads, scale, out);
  check_launch("attention kernel");
}

}  // namespace fak::cuda
