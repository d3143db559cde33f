// Gated DeltaNet, the linear-attention layer of the Qwen3.5 hybrids (HF Qwen3_5GatedDeltaNet):
//
//   qkv  = SiLU(causal depthwise conv1d(in_proj_qkv x))   split into q | k | v heads
//   q, k   L2-normalised per head (eps 1e-6), q scaled by 1/sqrt(k_head_dim); value head h reads
//          q/k head h / (n_v_heads / n_k_heads) (HF's repeat_interleave; h % n_k_heads with the
//          heads in llama.cpp's tiled order, DeltaNetParams::tiled_v_heads)
//   beta = sigmoid(in_proj_b x)
//   g    = -exp(A_log) * softplus(in_proj_a x + dt_bias)          (log of the per-head decay)
//   S_t  = e^g_t S_{t-1} + k_t [beta_t (v_t - (e^g_t S_{t-1})^T k_t)]^T,   o_t = S_t^T q_t
//   y    = out_proj(RMSNorm(o_t per head) * norm.weight * SiLU(in_proj_z x))   (in forward.cpp)
//
// The delta rule runs its recurrent form (HF torch_recurrent_gated_delta_rule) for every token of
// every call, prefill included (ops/deltanet_step.h): HF's chunked prefill form is the same
// recurrence in exact arithmetic but rounds differently, so a state computed in chunks would depend
// on how its tokens were grouped into calls. This way the state after a sequence depends on its
// tokens alone, whatever the calls, the batch or the thread count, as on the CUDA backend: a
// prefix-cache hit, a replay after an edit, a clone, a batched step and a verified speculative
// draft all reproduce a cold run bit for bit, with no rule about call boundaries.
//
// Cost: per token and value head ~4 dk dv flops over a dk x dv memory that stays in cache, small
// next to the layer's projections (bench/deltanet_bench.cpp: ~1.1M head-tokens/s with AVX-512 at
// dk = dv = 128, so a Qwen3.5-0.8B token's 288 head-layers take ~0.25 ms on one core).
#include "ops/deltanet.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "memory/recurrent_state.h"
#include "ops/deltanet_step.h"
#include "ops/matmul_kernels.h"
#include "ops/vec.h"

namespace fak {

namespace {

constexpr double kL2NormEps = 1e-6;  // HF l2norm's own eps, not rms_norm_eps

struct Shape {
  int nk, nv, dk, dv, kernel, key_dim, value_dim, conv_dim;
  const DeltaNetParams& params;
  explicit Shape(const DeltaNetParams& p)
      : nk(p.n_k_heads),
        nv(p.n_v_heads),
        dk(p.k_head_dim),
        dv(p.v_head_dim),
        kernel(p.conv_kernel),
        key_dim(nk * dk),
        value_dim(nv * dv),
        conv_dim(2 * key_dim + value_dim),
        params(p) {}
};

double softplus(double x) {
  return x > 20.0 ? x : std::log1p(std::exp(x));
}  // torch's threshold

// Causal depthwise conv over [state | x] followed by SiLU, for one sequence. wt: the weights
// transposed, [kernel][conv_dim]; x, out: [n][conv_dim]; state: [conv_dim][kernel - 1], replaced by
// the last kernel - 1 inputs.
//
// Token by token with the channels innermost, so each output row reads kernel contiguous input
// rows and vectorises; SiLU is x / (1 + exp_poly(-x)) through the vector kernels (silu_mul by ones:
// the same bits on every ISA). Each output depends on its own window only: no bit depends on the
// call's other tokens, its length or the thread count.
void conv_silu(const Shape& s, const float* wt, float* state, const float* x, int n, float* out) {
  const int K = s.kernel, km1 = K - 1;
  const size_t cd = size_t(s.conv_dim);
  thread_local std::vector<float> head, ones;
  head.resize(size_t(km1) * cd);  // [K - 1][conv_dim]: the state as input rows
  if (ones.size() < cd) ones.assign(cd, 1.0f);
  for (size_t ch = 0; ch < cd; ++ch)
    for (int i = 0; i < km1; ++i) head[size_t(i) * cd + ch] = state[ch * size_t(km1) + size_t(i)];
  const float* hd = head.data();
  auto in = [&](int i) { return i < km1 ? hd + size_t(i) * cd : x + size_t(i - km1) * cd; };
  const float* w = wt;
  const float* one = ones.data();
  const auto silu_mul = vec_kernels().silu_mul;
#pragma omp parallel for schedule(static) if (size_t(n) * cd >= (1u << 15))
  for (int t = 0; t < n; ++t) {
    float* o = out + size_t(t) * cd;
    const float* r0 = in(t);
    // omp simd: GCC's -O2 left these a float at a time (2% of a pp512 of the Qwen3.5 Q8_0 cut);
    // each element still a multiply then an add, so the same bits.
#pragma omp simd
    for (size_t ch = 0; ch < cd; ++ch) o[ch] = w[ch] * r0[ch];
    for (int j = 1; j < K; ++j) {
      const float* r = in(t + j);
      const float* wj = w + size_t(j) * cd;
#pragma omp simd
      for (size_t ch = 0; ch < cd; ++ch) o[ch] += wj[ch] * r[ch];
    }
    silu_mul(o, one, int(cd), o);
  }
  // The last K - 1 inputs become the state (read from head before it is overwritten: head is a
  // copy).
  for (int i = 0; i < km1; ++i) {
    const float* r = in(n + i);
    for (size_t ch = 0; ch < cd; ++ch) state[ch * size_t(km1) + size_t(i)] = r[ch];
  }
}

void l2_normalise(float* x, int n, double scale) {
  double ss = 0.0;
  for (int i = 0; i < n; ++i) ss += double(x[i]) * double(x[i]);
  const float f = float(scale / std::sqrt(ss + kL2NormEps));
  for (int i = 0; i < n; ++i) x[i] *= f;
}

}  // namespace

DeltaStepFn delta_step_kernel() {
  if (kernels::avx512_enabled()) return delta_step_avx512();
  static const DeltaStepFn fn = kernels::cpu_has_avx2() ? delta_step_avx2() : delta_step_ref;
  return fn;
}

void deltanet_core(const DeltaNetParams& p, int layer, std::span<const DeltaNetSequence> seqs,
                   const float* qkv, const float* b, const float* a, const DeltaNetScratch& scratch,
                   float* core) {
  const Shape s(p);
  int T = 0;
  for (const DeltaNetSequence& q : seqs) T += q.n_tokens;
  float* conv = scratch.conv;
  float* beta = scratch.beta;
  float* g = scratch.g;
  const size_t cd = size_t(s.conv_dim), vd = size_t(s.value_dim), nv = size_t(s.nv);

  std::vector<int> first(seqs.size());  // first row of each sequence
  {
    thread_local std::vector<float> wt;  // [kernel][conv_dim]
    wt.resize(size_t(s.kernel) * cd);
    for (size_t ch = 0; ch < cd; ++ch)
      for (int j = 0; j < s.kernel; ++j)
        wt[size_t(j) * cd + ch] = (*p.conv)[ch * size_t(s.kernel) + size_t(j)];
    int t0 = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const DeltaNetSequence& q = seqs[i];
      check(q.state != nullptr && !q.state->empty(),
            "forward: a hybrid model needs a RecurrentState for every batch item");
      first[i] = t0;
      conv_silu(s, wt.data(), q.state->conv(layer), qkv + size_t(t0) * cd, q.n_tokens,
                &conv[size_t(t0) * cd]);
      t0 += q.n_tokens;
    }
  }

  const double q_scale = 1.0 / std::sqrt(double(s.dk));
#pragma omp parallel for schedule(static) if (T > 4)
  for (int t = 0; t < T; ++t) {
    float* row = &conv[size_t(t) * cd];
    for (int h = 0; h < s.nk; ++h) {
      l2_normalise(row + size_t(h) * size_t(s.dk), s.dk, q_scale);
      l2_normalise(row + size_t(s.key_dim) + size_t(h) * size_t(s.dk), s.dk, 1.0);
    }
    for (int h = 0; h < s.nv; ++h) {
      const size_t i = size_t(t) * nv + size_t(h);
      beta[i] = 1.0f / (1.0f + std::exp(-b[i]));
      g[i] = float(double((*p.ssm_a)[size_t(h)]) *
                   softplus(double(a[i]) + double((*p.dt_bias)[size_t(h)])));
    }
  }

  // The delta rule: one task per (sequence, value head), each sequential over its tokens.
  const DeltaStepFn step = delta_step_kernel();
  const int n_tasks = int(seqs.size()) * s.nv;
  const size_t work = size_t(T) * nv * size_t(s.dk) * size_t(s.dv);
#pragma omp parallel for schedule(dynamic, 1) if (n_tasks > 1 && work >= (1u << 16))
  for (int task = 0; task < n_tasks; ++task) {
    const DeltaNetSequence& q = seqs[size_t(task / s.nv)];
    if (q.n_tokens == 0) continue;
    const int h = task % s.nv;
    const int kh = s.params.key_head(h);
    float* S = q.state->ssm(layer) + size_t(h) * size_t(s.dk) * size_t(s.dv);
    const size_t t = size_t(first[size_t(task / s.nv)]);
    const float* row = &conv[t * cd];
    const DeltaHeadRows r{row + size_t(kh) * size_t(s.dk),
                          row + size_t(s.key_dim) + size_t(kh) * size_t(s.dk),
                          row + 2 * size_t(s.key_dim) + size_t(h) * size_t(s.dv),
                          cd,
                          &beta[t * nv + size_t(h)],
                          &g[t * nv + size_t(h)],
                          nv,
                          &core[t * vd + size_t(h) * size_t(s.dv)],
                          vd};
    step(S, s.dk, s.dv, r, q.n_tokens);
  }
}

}  // namespace fak
