// The CUDA kernels of a Gated DeltaNet layer (ops/deltanet.cpp is the CPU version and says what
// the layer computes). On the device, as on the CPU, every token goes through the recurrent form of
// the delta rule (no chunked form): the state after a sequence then depends on its tokens only, not
// on how they were grouped into forward calls, and each value head's memory is one block's, so the
// batch never changes a bit. The two backends agree to f32 rounding (each has its own bits).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace fak::cuda {

struct DeltaNetShape {
  int nk = 0, nv = 0, dk = 0, dv = 0, kernel = 0;
  bool tiled = false;  // value heads in llama.cpp's tiled order (DeltaNetParams::tiled_v_heads)
  __host__ __device__ int key_head(int h) const { return tiled ? h % nk : h / (nv / nk); }
  __host__ __device__ int key_dim() const { return nk * dk; }
  __host__ __device__ int value_dim() const { return nv * dv; }
  __host__ __device__ int conv_dim() const { return 2 * key_dim() + value_dim(); }
};

// Where each batch item's state is: item i's floats start at states + i * state_stride; this
// layer's conv state [conv_dim][kernel - 1] at + conv_offset, its memory S [nv][dk][dv] at
// + ssm_offset. Item i's tokens are rows [first[i], first[i + 1]) of the batch.
struct DeltaNetStates {
  float* states = nullptr;
  size_t state_stride = 0, conv_offset = 0, ssm_offset = 0;
  const int32_t* first = nullptr;  // [n_items + 1]
  int n_items = 0;
};

// out[t] = SiLU(causal depthwise conv over [state | x]) per channel; the state becomes the last
// kernel - 1 inputs of each item. x, out: [T][conv_dim]; weight [conv_dim][kernel].
void deltanet_conv(const DeltaNetShape& s, const float* weight, const DeltaNetStates& st,
                   const float* x, float* out, cudaStream_t stream);

// In place on rows [T][conv_dim] = q | k | v: each q head L2-normalised and scaled by q_scale, each
// k head L2-normalised (eps 1e-6, HF's l2norm); beta = sigmoid(b), g = ssm_a * softplus(a +
// dt_bias), all [T][nv].
void deltanet_prepare(const DeltaNetShape& s, float* rows, int T, const float* b, const float* a,
                      const float* ssm_a, const float* dt_bias, double q_scale, float* beta,
                      float* g, cudaStream_t stream);

// The delta rule, token by token, for every (item, value head); out [T][value_dim].
void deltanet_recurrence(const DeltaNetShape& s, const DeltaNetStates& st, const float* rows,
                         const float* beta, const float* g, float* out, cudaStream_t stream);

}  // namespace fak::cuda
