// The transformer forward pass over a batch of sequences: embeddings, then per layer
// RMSNorm -> attention (GQA, RoPE, optional q/k norm and output gate) or Gated DeltaNet -> residual
// -> RMSNorm -> SwiGLU MLP -> residual, then the final norm and the logits. Reads top to bottom
// like the papers; matmuls see all tokens of all sequences at once so each weight is read once.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "memory/kv_cache.h"
#include "models/deltanet.h"
#include "models/device_forward.h"
#include "models/model.h"
#include "ops/attention.h"
#include "ops/matmul.h"
#include "ops/ops.h"

namespace fak {

namespace {

void add_bias(float* y, const std::vector<float>& b, int n_tokens) {
  if (b.empty()) return;
  const int n = int(b.size());
  for (int t = 0; t < n_tokens; ++t) add_inplace(y + size_t(t) * size_t(n), b.data(), n);
}

struct Scratch {
  std::vector<float> x, xn, q, k, v, attn, proj, gate, up;
  void resize(const ModelConfig& c, int T) {
    auto sz = [T](int n) { return size_t(T) * size_t(n); };
    const int q_rows = c.q_dim() * (c.attn_output_gate ? 2 : 1);
    x.resize(sz(c.dim));
    xn.resize(sz(c.dim));
    q.resize(sz(std::max(q_rows, c.dim)));
    k.resize(sz(c.kv_dim()));
    v.resize(sz(c.kv_dim()));
    attn.resize(sz(std::max(c.q_dim(), c.dim)));
    proj.resize(sz(c.dim));
    gate.resize(sz(std::max(c.hidden_dim, c.q_dim())));
    up.resize(sz(c.hidden_dim));
  }
};

}  // namespace

LogitRows logit_rows(std::span<const BatchItem> batch, int vocab) {
  LogitRows r;
  int t = 0;
  for (const BatchItem& it : batch) {
    if (it.logits) {
      if (it.all_logits) {
        for (int i = 0; i < it.n_tokens; ++i) {
          r.rows.push_back(t + i);
          r.outs.push_back(it.logits + size_t(i) * size_t(vocab));
        }
      } else {
        r.rows.push_back(t + it.n_tokens - 1);
        r.outs.push_back(it.logits);
      }
    }
    t += it.n_tokens;
  }
  return r;
}

void Model::forward(std::span<const BatchItem> batch, KvCache& cache,
                    const HiddenHook* hook) const {
  const ModelConfig& c = config_;
  int T = 0;
  for (const BatchItem& it : batch) {
    if (it.n_tokens <= 0) fail("forward: empty batch item");
    if (it.start_pos + it.n_tokens > c.max_seq_len)
      fail("context of " + std::to_string(it.start_pos + it.n_tokens) +
           " tokens exceeds the model's maximum of " + std::to_string(c.max_seq_len));
    for (int i = 0; i < it.n_tokens; ++i)
      if (it.tokens[i] < 0 || it.tokens[i] >= c.vocab)
        fail("token id " + std::to_string(it.tokens[i]) + " is outside the vocabulary (0.." +
             std::to_string(c.vocab - 1) + ")");
    T += it.n_tokens;
  }
  if (device_forward_) {
    device_forward_->forward(batch, cache, hook);
    return;
  }
  check(cache.storage().host_accessible(),
        "forward: the model runs on the CPU but its KV cache lives in " + cache.storage().name());
  // note: a reference, not the thread_local itself, so OpenMP workers see the caller's buffers.
  thread_local Scratch tls_scratch;
  Scratch& s = tls_scratch;
  s.resize(c, T);
  const size_t D = size_t(c.dim);

  // Per-token positions and RoPE angles (shared by every layer).
  const int half = rope_->rotary_dim() / 2;
  std::vector<float> cos(size_t(T) * size_t(half)), sin(size_t(T) * size_t(half));
  {
    int t = 0;
    for (const BatchItem& it : batch)
      for (int i = 0; i < it.n_tokens; ++i, ++t)
        rope_->angles(it.start_pos + i, &cos[size_t(t) * size_t(half)],
                      &sin[size_t(t) * size_t(half)]);
  }

  {
    int t = 0;
    for (const BatchItem& it : batch)
      for (int i = 0; i < it.n_tokens; ++i, ++t)
        dequantize_row(weights_.embed, it.tokens[i], &s.x[size_t(t) * D]);
  }
  if (hook) (*hook)(0, s.x.data(), T);

  const int hd = c.head_dim;
  const int kv_dim = c.kv_dim();
  const int bs = cache.block_size();
  const AttentionShape shape{c.n_heads, c.n_kv_heads, hd, float(1.0 / std::sqrt(double(hd)))};

  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = weights_.layers[size_t(l)];
#pragma omp parallel for schedule(static) if (T > 4)
    for (int t = 0; t < T; ++t)
      rmsnorm(&s.x[size_t(t) * D], L.attn_norm.data(), c.dim, c.rms_eps, &s.xn[size_t(t) * D]);

    if (L.kind == LayerKind::FullAttention) {
      const AttentionWeights& A = L.attn;
      const int q_rows = int(A.wq.rows);
      matmul(A.wq, s.xn.data(), T, s.q.data());
      matmul(A.wk, s.xn.data(), T, s.k.data());
      matmul(A.wv, s.xn.data(), T, s.v.data());
      add_bias(s.q.data(), A.bq, T);
      add_bias(s.k.data(), A.bk, T);
      add_bias(s.v.data(), A.bv, T);
      // With an output gate, q_proj yields per head [query (head_dim) | gate (head_dim)]: split the
      // gate off into s.proj so the query rows are contiguous again.
      if (c.attn_output_gate) {
        for (int t = 0; t < T; ++t)
          for (int h = 0; h < c.n_heads; ++h) {
            const float* src = &s.q[size_t(t) * size_t(q_rows) + size_t(h) * 2 * size_t(hd)];
            std::memcpy(&s.attn[size_t(t) * size_t(c.q_dim()) + size_t(h) * size_t(hd)], src,
                        sizeof(float) * size_t(hd));
            std::memcpy(&s.gate[size_t(t) * size_t(c.q_dim()) + size_t(h) * size_t(hd)], src + hd,
                        sizeof(float) * size_t(hd));
          }
        std::memcpy(s.q.data(), s.attn.data(), sizeof(float) * size_t(T) * size_t(c.q_dim()));
      }
      const int al = attention_index_[size_t(l)];
      int t = 0;
      for (const BatchItem& it : batch) {
        for (int i = 0; i < it.n_tokens; ++i, ++t) {
          float* qt = &s.q[size_t(t) * size_t(c.q_dim())];
          float* kt = &s.k[size_t(t) * size_t(kv_dim)];
          if (c.qk_norm) {
            for (int h = 0; h < c.n_heads; ++h)
              rmsnorm(qt + h * hd, A.q_norm.data(), hd, c.rms_eps, qt + h * hd);
            for (int h = 0; h < c.n_kv_heads; ++h)
              rmsnorm(kt + h * hd, A.k_norm.data(), hd, c.rms_eps, kt + h * hd);
          }
          const int pos = it.start_pos + i;
          const int32_t block = (*it.blocks)[size_t(pos / bs)];
          const int slot = pos % bs;
          cache.store_row(block, al, KvPlane::Kraw, slot, kt);
          const float* cs = &cos[size_t(t) * size_t(half)];
          const float* sn = &sin[size_t(t) * size_t(half)];
          for (int h = 0; h < c.n_heads; ++h) rope_apply(qt + h * hd, 2 * half, cs, sn);
          for (int h = 0; h < c.n_kv_heads; ++h) rope_apply(kt + h * hd, 2 * half, cs, sn);
          cache.store_row(block, al, KvPlane::K, slot, kt);
          cache.store_row(block, al, KvPlane::V, slot, &s.v[size_t(t) * size_t(kv_dim)]);
        }
      }
      std::vector<AttentionTask> tasks;
      t = 0;
      for (const BatchItem& it : batch) {
        tasks.push_back({&s.q[size_t(t) * size_t(c.q_dim())],
                         &s.attn[size_t(t) * size_t(c.q_dim())], it.blocks, it.n_tokens,
                         it.start_pos});
        t += it.n_tokens;
      }
      attention(tasks, cache, al, shape);
      if (c.attn_output_gate) {
        const size_t n = size_t(T) * size_t(c.q_dim());
        for (size_t i = 0; i < n; ++i) s.attn[i] *= 1.0f / (1.0f + std::exp(-s.gate[i]));
      }
      matmul(A.wo, s.attn.data(), T, s.proj.data());
      add_bias(s.proj.data(), A.bo, T);
    } else {
      deltanet_layer(c, L.delta, l, batch, s.xn.data(), T, s.proj.data());
    }
    add_inplace(s.x.data(), s.proj.data(), T * c.dim);

#pragma omp parallel for schedule(static) if (T > 4)
    for (int t = 0; t < T; ++t)
      rmsnorm(&s.x[size_t(t) * D], L.mlp_norm.data(), c.dim, c.rms_eps, &s.xn[size_t(t) * D]);
    const MlpWeights& M = L.mlp;
    matmul(M.gate, s.xn.data(), T, s.gate.data());
    matmul(M.up, s.xn.data(), T, s.up.data());
    add_bias(s.gate.data(), M.b_gate, T);
    add_bias(s.up.data(), M.b_up, T);
    silu_mul(s.gate.data(), s.up.data(), T * c.hidden_dim, s.gate.data());
    matmul(M.down, s.gate.data(), T, s.proj.data());
    add_bias(s.proj.data(), M.b_down, T);
    add_inplace(s.x.data(), s.proj.data(), T * c.dim);
    if (hook) (*hook)(l + 1, s.x.data(), T);
  }

  // Final norm + logits, only for the rows someone asked for.
  const auto [rows, outs] = logit_rows(batch, c.vocab);
  if (hook) {
    for (int t = 0; t < T; ++t)
      rmsnorm(&s.x[size_t(t) * D], weights_.final_norm.data(), c.dim, c.rms_eps,
              &s.xn[size_t(t) * D]);
    (*hook)(c.n_layers + 1, s.xn.data(), T);
  }
  if (rows.empty()) return;
  std::vector<float> normed(rows.size() * D);
  for (size_t i = 0; i < rows.size(); ++i)
    rmsnorm(&s.x[size_t(rows[i]) * D], weights_.final_norm.data(), c.dim, c.rms_eps,
            &normed[i * D]);
  // Logits of consecutive rows land in consecutive outputs only within an item; compute into a
  // temporary when outputs are scattered.
  std::vector<float> logits(rows.size() * size_t(c.vocab));
  matmul(weights_.lm_head, normed.data(), int(rows.size()), logits.data());
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(outs[i], &logits[i * size_t(c.vocab)], sizeof(float) * size_t(c.vocab));
}

}  // namespace fak
