// Gated DeltaNet, the linear-attention layer of the Qwen3.5 hybrids (HF Qwen3_5GatedDeltaNet):
//
//   qkv  = SiLU(causal depthwise conv1d(in_proj_qkv x))   split into q | k | v heads
//   q, k   L2-normalised per head (eps 1e-6), q scaled by 1/sqrt(k_head_dim); value head h reads
//          q/k head h / (n_v_heads / n_k_heads) (HF's repeat_interleave)
//   beta = sigmoid(in_proj_b x)
//   g    = -exp(A_log) * softplus(in_proj_a x + dt_bias)          (log of the per-head decay)
//   S_t  = e^g_t S_{t-1} + k_t [beta_t (v_t - (e^g_t S_{t-1})^T k_t)]^T,   o_t = S_t^T q_t
//   y    = out_proj(RMSNorm(o_t per head) * norm.weight * SiLU(in_proj_z x))   (in forward.cpp)
//
// The recurrence runs in chunks of kChunk tokens counted from the first token of each batch item:
// a chunk of several tokens uses the chunked form (HF torch_chunk_gated_delta_rule: a UT transform
// turns the chunk's delta updates into triangular solves and small matmuls), a chunk of one token
// the recurrent step (torch_recurrent_gated_delta_rule).
//
// note: the two forms are equal in exact arithmetic, not in f32. So the state after a sequence
// depends on how its tokens were grouped into forward calls — and on nothing else: given the same
// grouping the result is bit-identical whatever the thread count or the other items in the batch.
// runtime/session keeps each sequence's grouping and replays with it, which is what keeps the
// reuse stack (cache hit, truncate, evict, save/load, batched decode) exact on hybrid models.
#include "ops/deltanet.h"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "memory/recurrent_state.h"

namespace fak {

namespace {

constexpr int kChunk = 64;           // HF's chunk_size
constexpr double kL2NormEps = 1e-6;  // HF l2norm's own eps, not rms_norm_eps

struct Shape {
  int nk, nv, dk, dv, kernel, key_dim, value_dim, conv_dim, group;
  explicit Shape(const DeltaNetParams& p)
      : nk(p.n_k_heads),
        nv(p.n_v_heads),
        dk(p.k_head_dim),
        dv(p.v_head_dim),
        kernel(p.conv_kernel),
        key_dim(nk * dk),
        value_dim(nv * dv),
        conv_dim(2 * key_dim + value_dim),
        group(nv / nk) {}
};

float silu(float x) {
  return x / (1.0f + std::exp(-x));
}

double softplus(double x) {
  return x > 20.0 ? x : std::log1p(std::exp(x));
}  // torch's threshold

// Causal depthwise conv over [state | x] followed by SiLU, for one sequence. x, out: [n][conv_dim];
// state: [conv_dim][kernel - 1], replaced by the last kernel - 1 inputs.
void conv_silu(const Shape& s, const float* weight, float* state, const float* x, int n,
               float* out) {
  const int km1 = s.kernel - 1;
  const size_t cd = size_t(s.conv_dim);
#pragma omp parallel for schedule(static) if (size_t(n) * cd >= (1u << 15))
  for (int ch = 0; ch < s.conv_dim; ++ch) {
    const float* w = weight + size_t(ch) * size_t(s.kernel);
    float* st = state + size_t(ch) * size_t(km1);
    auto in = [&](int i) { return i < km1 ? st[i] : x[size_t(i - km1) * cd + size_t(ch)]; };
    for (int t = 0; t < n; ++t) {
      float acc = 0.0f;
      for (int j = 0; j < s.kernel; ++j) acc += w[j] * in(t + j);
      out[size_t(t) * cd + size_t(ch)] = silu(acc);
    }
    // In place is safe: st[i] is written after every read of st[<= i] and before none of st[> i].
    for (int i = 0; i < km1; ++i) st[i] = in(n + i);
  }
}

void l2_normalise(float* x, int n, double scale) {
  double ss = 0.0;
  for (int i = 0; i < n; ++i) ss += double(x[i]) * double(x[i]);
  const float f = float(scale / std::sqrt(ss + kL2NormEps));
  for (int i = 0; i < n; ++i) x[i] *= f;
}

float dot(const float* a, const float* b, int n) {
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

void axpy(float* y, float a, const float* x, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

// One head's view of a run of tokens: row i of q/k/v is at q + i * qkv_stride, etc.
struct HeadRows {
  const float *q, *k, *v;
  size_t qkv_stride;
  const float *beta, *g;  // stride gb_stride
  size_t gb_stride;
  float* out;  // [i * out_stride][dv]
  size_t out_stride;
};

// One token through one head's memory S [dk][dv].
void recurrent_step(const Shape& s, float* S, const HeadRows& r, float* tmp) {
  const float decay = float(std::exp(double(r.g[0])));
  const float beta = r.beta[0];
  float* kv = tmp;  // [dv]: (decayed S)^T k
  std::memset(kv, 0, sizeof(float) * size_t(s.dv));
  for (int kk = 0; kk < s.dk; ++kk) {
    float* row = S + size_t(kk) * size_t(s.dv);
    for (int d = 0; d < s.dv; ++d) row[d] *= decay;
    axpy(kv, r.k[kk], row, s.dv);
  }
  for (int d = 0; d < s.dv; ++d) kv[d] = beta * (r.v[d] - kv[d]);  // now the delta
  std::memset(r.out, 0, sizeof(float) * size_t(s.dv));
  for (int kk = 0; kk < s.dk; ++kk) {
    float* row = S + size_t(kk) * size_t(s.dv);
    axpy(row, r.k[kk], kv, s.dv);
    axpy(r.out, r.q[kk], row, s.dv);
  }
}

struct ChunkScratch {
  std::vector<double> G;  // [L] cumulative log decay within the chunk
  std::vector<float> A;   // [L][L] strictly lower: beta_i (k_i . k_j) e^(G_i - G_j)
  std::vector<float> U;   // [L][dv] solved values, then v_new
  std::vector<float> W;   // [L][dk] solved decayed keys (HF k_cumdecay)
  std::vector<float> tmp;
};

// L > 1 tokens through one head's memory S [dk][dv], HF torch_chunk_gated_delta_rule for one
// chunk. Loops only touch j <= i, so row i's output never depends on later rows of the chunk.
void chunk_step(const Shape& s, float* S, const HeadRows& r, int L, ChunkScratch& w) {
  const int dk = s.dk, dv = s.dv;
  const size_t qs = r.qkv_stride;
  auto q = [&](int i) { return r.q + size_t(i) * qs; };
  auto k = [&](int i) { return r.k + size_t(i) * qs; };
  auto beta = [&](int i) { return r.beta[size_t(i) * r.gb_stride]; };
  w.G.resize(size_t(L));
  w.A.resize(size_t(L) * size_t(L));
  w.U.resize(size_t(L) * size_t(dv));
  w.W.resize(size_t(L) * size_t(dk));
  double acc = 0.0;
  for (int i = 0; i < L; ++i) w.G[size_t(i)] = acc += double(r.g[size_t(i) * r.gb_stride]);
  auto decay = [&](int i, int j) { return float(std::exp(w.G[size_t(i)] - w.G[size_t(j)])); };

  // Forward substitution of (I + A) [U | W] = [beta v | beta e^G k].
  for (int i = 0; i < L; ++i) {
    float* a = &w.A[size_t(i) * size_t(L)];
    for (int j = 0; j < i; ++j) a[j] = beta(i) * dot(k(i), k(j), dk) * decay(i, j);
    float* u = &w.U[size_t(i) * size_t(dv)];
    float* wk = &w.W[size_t(i) * size_t(dk)];
    const float* v = r.v + size_t(i) * qs;
    for (int d = 0; d < dv; ++d) u[d] = beta(i) * v[d];
    const float bg = beta(i) * float(std::exp(w.G[size_t(i)]));
    for (int d = 0; d < dk; ++d) wk[d] = bg * k(i)[d];
    for (int j = 0; j < i; ++j) {
      axpy(u, -a[j], &w.U[size_t(j) * size_t(dv)], dv);
      axpy(wk, -a[j], &w.W[size_t(j) * size_t(dk)], dk);
    }
  }
  // v_new_i = U_i - S^T W_i: the part of the update the incoming state does not already predict.
  for (int i = 0; i < L; ++i) {
    float* u = &w.U[size_t(i) * size_t(dv)];
    const float* wk = &w.W[size_t(i) * size_t(dk)];
    for (int kk = 0; kk < dk; ++kk) axpy(u, -wk[kk], S + size_t(kk) * size_t(dv), dv);
  }
  // o_i = e^G_i S^T q_i + sum_{j <= i} (q_i . k_j) e^(G_i - G_j) v_new_j
  for (int i = 0; i < L; ++i) {
    float* o = r.out + size_t(i) * r.out_stride;
    std::memset(o, 0, sizeof(float) * size_t(dv));
    const float eg = float(std::exp(w.G[size_t(i)]));
    for (int kk = 0; kk < dk; ++kk) axpy(o, eg * q(i)[kk], S + size_t(kk) * size_t(dv), dv);
    for (int j = 0; j <= i; ++j)
      axpy(o, dot(q(i), k(j), dk) * decay(i, j), &w.U[size_t(j) * size_t(dv)], dv);
  }
  // S = e^G_last S + sum_j e^(G_last - G_j) k_j v_new_j^T
  const float el = float(std::exp(w.G[size_t(L - 1)]));
  for (size_t i = 0; i < size_t(dk) * size_t(dv); ++i) S[i] *= el;
  for (int j = 0; j < L; ++j) {
    const float kd = decay(L - 1, j);
    const float* u = &w.U[size_t(j) * size_t(dv)];
    for (int kk = 0; kk < dk; ++kk) axpy(S + size_t(kk) * size_t(dv), kd * k(j)[kk], u, dv);
  }
}

}  // namespace

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
    int t0 = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const DeltaNetSequence& q = seqs[i];
      check(q.state != nullptr && !q.state->empty(),
            "forward: a hybrid model needs a RecurrentState for every batch item");
      first[i] = t0;
      conv_silu(s, p.conv->data(), q.state->conv(layer), qkv + size_t(t0) * cd, q.n_tokens,
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
  const int n_tasks = int(seqs.size()) * s.nv;
  const size_t work = size_t(T) * nv * size_t(s.dk) * size_t(s.dv);
#pragma omp parallel for schedule(dynamic, 1) if (n_tasks > 1 && work >= (1u << 16))
  for (int task = 0; task < n_tasks; ++task) {
    const DeltaNetSequence& q = seqs[size_t(task / s.nv)];
    const int h = task % s.nv;
    const int kh = h / s.group;
    float* S = q.state->ssm(layer) + size_t(h) * size_t(s.dk) * size_t(s.dv);
    thread_local ChunkScratch scratch;
    scratch.tmp.resize(size_t(s.dv));
    for (int c0 = 0; c0 < q.n_tokens; c0 += kChunk) {
      const size_t t = size_t(first[size_t(task / s.nv)] + c0);
      const float* row = &conv[t * cd];
      HeadRows r{row + size_t(kh) * size_t(s.dk),
                 row + size_t(s.key_dim) + size_t(kh) * size_t(s.dk),
                 row + 2 * size_t(s.key_dim) + size_t(h) * size_t(s.dv),
                 cd,
                 &beta[t * nv + size_t(h)],
                 &g[t * nv + size_t(h)],
                 nv,
                 &core[t * vd + size_t(h) * size_t(s.dv)],
                 vd};
      const int L = std::min(kChunk, q.n_tokens - c0);
      if (L == 1) {
        recurrent_step(s, S, r, scratch.tmp.data());
      } else {
        chunk_step(s, S, r, L, scratch);
      }
    }
  }
}

}  // namespace fak
