// Gated DeltaNet on the device (see deltanet_kernels.h).
#include <algorithm>
#include <cmath>

#include "cuda/deltanet_kernels.h"
#include "cuda/kernels.h"

namespace fak::cuda {

namespace {

constexpr int kThreads = 256;

// One thread per (item, channel), through the item's tokens in order.
__global__ void conv_kernel(DeltaNetShape s, const float* weight, DeltaNetStates st, const float* x,
                            float* out) {
  const int item = blockIdx.y;
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  const int cd = s.conv_dim();
  if (ch >= cd) return;
  const int km1 = s.kernel - 1;
  const float* w = weight + size_t(ch) * size_t(s.kernel);
  float* state = st.states + size_t(item) * st.state_stride + st.conv_offset + size_t(ch) * km1;
  const int t0 = st.first[item], n = st.first[item + 1] - t0;
  // The window of the last `kernel` inputs, oldest first (kernel <= 8 in every checkpoint).
  float window[8];
  for (int i = 0; i < km1; ++i) window[i] = state[i];
  for (int t = 0; t < n; ++t) {
    window[km1] = x[size_t(t0 + t) * size_t(cd) + size_t(ch)];
    float acc = 0.0f;
    for (int j = 0; j < s.kernel; ++j) acc += w[j] * window[j];
    out[size_t(t0 + t) * size_t(cd) + size_t(ch)] = __fdiv_rn(acc, __fadd_rn(1.0f, expf(-acc)));
    for (int i = 0; i < km1; ++i) window[i] = window[i + 1];
  }
  for (int i = 0; i < km1; ++i) state[i] = window[i];
}

// One block per (token, head) of the 2 * nk q and k heads: a fixed-tree double sum of squares.
__global__ void l2norm_kernel(float* rows, int row_stride, int nk, int dk, double q_scale) {
  const int t = blockIdx.x, head = blockIdx.y;  // heads 0..nk-1 are q, nk..2nk-1 are k
  float* x = rows + size_t(t) * size_t(row_stride) + size_t(head) * size_t(dk);
  __shared__ double part[kThreads];
  double ss = 0.0;
  for (int i = threadIdx.x; i < dk; i += kThreads) ss += double(x[i]) * double(x[i]);
  part[threadIdx.x] = ss;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (int(threadIdx.x) < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  const double scale = head < nk ? q_scale : 1.0;
  const float f = float(scale / sqrt(part[0] + 1e-6));
  for (int i = threadIdx.x; i < dk; i += kThreads) x[i] = __fmul_rn(x[i], f);
}

__global__ void gates_kernel(int nv, size_t n, const float* b, const float* a, const float* ssm_a,
                             const float* dt_bias, float* beta, float* g) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const int h = int(i % size_t(nv));
    beta[i] = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-b[i])));
    const double x = double(a[i]) + double(dt_bias[h]);
    const double softplus = x > 20.0 ? x : log1p(exp(x));  // torch's threshold
    g[i] = float(double(ssm_a[h]) * softplus);
  }
}

// One block per (item, value head), thread j owning column j of the head's memory S [dk][dv]:
// every step reads and writes only its own column, so no thread waits on another's sums.
__global__ void recurrence_kernel(DeltaNetShape s, DeltaNetStates st, const float* rows,
                                  const float* beta, const float* g, float* out) {
  extern __shared__ float qk[];  // [2][dk]: this token's q and k
  const int item = blockIdx.x, h = blockIdx.y, j = threadIdx.x;
  const int dk = s.dk, dv = s.dv, cd = s.conv_dim(), vd = s.value_dim();
  const int kh = s.key_head(h);
  float* S = st.states + size_t(item) * st.state_stride + st.ssm_offset +
             size_t(h) * size_t(dk) * size_t(dv);
  const int t0 = st.first[item], t1 = st.first[item + 1];
  for (int t = t0; t < t1; ++t) {
    const float* row = rows + size_t(t) * size_t(cd);
    for (int i = j; i < dk; i += blockDim.x) {
      qk[i] = row[size_t(kh) * size_t(dk) + size_t(i)];
      qk[dk + i] = row[size_t(s.key_dim()) + size_t(kh) * size_t(dk) + size_t(i)];
    }
    __syncthreads();
    if (j < dv) {
      const size_t gi = size_t(t) * size_t(s.nv) + size_t(h);
      const float decay = float(exp(double(g[gi])));
      float kv = 0.0f;  // (decayed S)^T k, column j
      for (int i = 0; i < dk; ++i) {
        const float v = __fmul_rn(S[size_t(i) * size_t(dv) + size_t(j)], decay);
        S[size_t(i) * size_t(dv) + size_t(j)] = v;
        kv += qk[dk + i] * v;
      }
      const float vj = row[2 * size_t(s.key_dim()) + size_t(h) * size_t(dv) + size_t(j)];
      const float delta = __fmul_rn(beta[gi], __fsub_rn(vj, kv));
      float o = 0.0f;
      for (int i = 0; i < dk; ++i) {
        const float v = S[size_t(i) * size_t(dv) + size_t(j)] + qk[dk + i] * delta;
        S[size_t(i) * size_t(dv) + size_t(j)] = v;
        o += qk[i] * v;
      }
      out[size_t(t) * size_t(vd) + size_t(h) * size_t(dv) + size_t(j)] = o;
    }
    __syncthreads();  // q and k are rewritten for the next token
  }
}

}  // namespace

void deltanet_conv(const DeltaNetShape& s, const float* weight, const DeltaNetStates& st,
                   const float* x, float* out, cudaStream_t stream) {
  if (st.n_items <= 0) return;
  const dim3 grid((s.conv_dim() + kThreads - 1) / kThreads, st.n_items);
  conv_kernel<<<grid, kThreads, 0, stream>>>(s, weight, st, x, out);
  check_launch("deltanet conv kernel");
}

void deltanet_prepare(const DeltaNetShape& s, float* rows, int T, const float* b, const float* a,
                      const float* ssm_a, const float* dt_bias, double q_scale, float* beta,
                      float* g, cudaStream_t stream) {
  if (T <= 0) return;
  l2norm_kernel<<<dim3(T, 2 * s.nk), kThreads, 0, stream>>>(rows, s.conv_dim(), s.nk, s.dk,
                                                            q_scale);
  check_launch("deltanet l2norm kernel");
  const size_t n = size_t(T) * size_t(s.nv);
  const int blocks = int(std::min<size_t>((n + 255) / 256, 65535));
  gates_kernel<<<blocks, 256, 0, stream>>>(s.nv, n, b, a, ssm_a, dt_bias, beta, g);
  check_launch("deltanet gates kernel");
}

void deltanet_recurrence(const DeltaNetShape& s, const DeltaNetStates& st, const float* rows,
                         const float* beta, const float* g, float* out, cudaStream_t stream) {
  if (st.n_items <= 0) return;
  const int threads = ((s.dv + 31) / 32) * 32;
  const size_t shared = 2 * size_t(s.dk) * sizeof(float);
  recurrence_kernel<<<dim3(st.n_items, s.nv), threads, shared, stream>>>(s, st, rows, beta, g, out);
  check_launch("deltanet recurrence kernel");
}

}  // namespace fak::cuda
