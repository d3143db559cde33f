// The transformer forward pass, written once over the backend's ops (backend/backend.h), for
// every family and device: embeddings, then per layer
//
//   x += mixer(RMSNorm(x))      attention (GQA, RoPE, optional q/k norm, output gate, sinks,
//                               a sliding window) or Gated DeltaNet
//   x += ffn(RMSNorm(x))        a gated MLP (SiLU or tanh-GELU), or a sparse MoE (softmax,
//                               sigmoid or chosen-softmax router; optional shared expert)
//
// (Gemma 3's sandwich norms also normalise each sublayer's output before it is added.)
//
// then the final norm and the logits. Matmuls see all tokens of all sequences at once, so each
// weight is read once per call (each expert once per call, for the tokens routed to it).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <optional>

#include "backend/backend.h"
#include "core/error.h"
#include "memory/recurrent_state.h"
#include "models/forward_profile.h"
#include "models/model.h"
#include "ops/deltanet.h"

namespace fak {

namespace {
// The dense MLP's tokens per pass (mlp_block): its gate and up activations are the widest buffers
// of a prefill call (Gemma 3 27B: 172 KiB a token, 86 MiB at 512), and each pass reads every
// weight from memory again and widens it into the tiles' panels. At 128 that was 6% of the
// Gemma-3-27B Q4_K_M cut's pp512, stalled on memory (perf), against 1.8% at 512 (llama-bench's
// micro-batch, so a pp512 takes one pass); peak RSS +72 MiB on that cut.
constexpr int kMlpCallTokens = 512;
}  // namespace

BufferSizes forward_buffer_sizes(const ModelConfig& c, int T) {
  BufferSizes s{};
  auto set = [&](Buf b, int64_t width) {
    s[size_t(b)] = size_t(T) * size_t(std::max<int64_t>(width, 0));
  };
  set(Buf::X, c.dim);
  set(Buf::XN, c.dim);
  set(Buf::Proj, c.dim);
  const bool attention = c.count_mixers(LayerKind::FullAttention) > 0;
  if (attention) {
    set(Buf::Q, c.q_dim());
    set(Buf::K, c.kv_dim());
    set(Buf::V, c.kv_dim());
    set(Buf::Attn, c.q_dim());
    if (c.attn_output_gate) {
      set(Buf::Q2, 2 * int64_t(c.q_dim()));
      set(Buf::AttnGate, c.q_dim());
    }
  }
  const bool dense = c.count_ffns(FfnKind::Dense) > 0;
  // The dense MLP runs kMlpCallTokens tokens at a time (mlp_block); a shared expert takes them all.
  const size_t hidden_floats =
      std::max(size_t(std::min(T, kMlpCallTokens)) * size_t(dense ? c.hidden_dim : 0),
               size_t(T) * size_t(std::max(c.shared_expert_hidden_dim, 0)));
  s[size_t(Buf::Gate)] = hidden_floats;
  s[size_t(Buf::Up)] = hidden_floats;
  if (c.is_hybrid()) {
    const int64_t key_dim = int64_t(c.linear_num_key_heads) * c.linear_key_head_dim;
    const int64_t value_dim = int64_t(c.linear_num_value_heads) * c.linear_value_head_dim;
    set(Buf::DeltaQkv, 2 * key_dim + value_dim);
    set(Buf::DeltaZ, value_dim);
    set(Buf::DeltaB, c.linear_num_value_heads);
    set(Buf::DeltaA, c.linear_num_value_heads);
    set(Buf::DeltaCore, value_dim);
    set(Buf::DeltaConv, 2 * key_dim + value_dim);
    set(Buf::DeltaBeta, c.linear_num_value_heads);
    set(Buf::DeltaG, c.linear_num_value_heads);
  }
  if (c.is_moe()) {
    set(Buf::Router, c.n_experts);
    set(Buf::MoeWeight, c.n_experts_used);
    const int64_t pairs = c.n_experts_used;  // (token, expert) pairs per token
    set(Buf::MoeRows, pairs * c.dim);
    set(Buf::MoeGate, pairs * c.expert_hidden_dim);
    set(Buf::MoeUp, pairs * c.expert_hidden_dim);
    if (c.shared_expert_hidden_dim > 0) {
      set(Buf::Shared, c.dim);
      set(Buf::SharedGate, 1);
    }
  }
  return s;
}

namespace {

DeltaNetParams deltanet_params(const ModelConfig& c, const DeltaNetWeights& D) {
  return {c.linear_num_key_heads,
          c.linear_num_value_heads,
          c.linear_key_head_dim,
          c.linear_value_head_dim,
          c.linear_conv_kernel,
          &D.conv1d,
          &D.ssm_a,
          &D.dt_bias,
          D.tiled_v_heads};
}

std::atomic<ForwardProfile*> g_profile{nullptr};

// Times one part of the pass into the installed profile, if any (forward_profile.h).
class PartTimer {
 public:
  explicit PartTimer(ForwardPart part, double bytes = 0)
      : profile_(g_profile.load(std::memory_order_relaxed)), part_(part), bytes_(bytes) {
    if (profile_) start_ = std::chrono::steady_clock::now();
  }
  ~PartTimer() {
    if (!profile_) return;
    ForwardPartStat& s = (*profile_)[size_t(part_)];
    ++s.calls;
    s.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    s.bytes += bytes_;
  }
  PartTimer(const PartTimer&) = delete;
  PartTimer& operator=(const PartTimer&) = delete;

 private:
  ForwardProfile* profile_;
  ForwardPart part_;
  double bytes_;
  std::chrono::steady_clock::time_point start_;
};

double matrix_bytes(std::initializer_list<const WeightMatrix*> ms) {
  double b = 0;
  for (const WeightMatrix* m : ms) b += double(m->bytes());
  return b;
}

// One forward call: the blocks, each reading a normed input and writing its output to Proj.
class Pass {
 public:
  Pass(const Model& m, BackendCall& b, int T)
      : m_(m), c_(m.config()), w_(m.weights()), b_(b), T_(T) {}

  void run(std::span<const BatchItem> batch, const HiddenHook* hook, const LogitRows& rows) {
    float* x = b_.buf(Buf::X);    // [T][dim] the residual stream
    float* xn = b_.buf(Buf::XN);  // [T][dim] a block's normed input
    const size_t n = size_t(T_) * size_t(c_.dim);
    {
      PartTimer t(ForwardPart::Embed, double(T_) * double(w_.embed.row_bytes));
      b_.embed(w_.embed, x);
      if (c_.embed_scale != 1.0f) b_.scale(x, n, c_.embed_scale);
    }
    if (hook) (*hook)(0, b_.host_view(x, n), T_);
    for (int l = 0; l < c_.n_layers; ++l) {
      const LayerSpec& s = m_.layer_spec(l);
      decoder_layer(s, w_.layers[size_t(l)],
                    s.mixer == LayerKind::FullAttention ? m_.attention_index(l) : -1, l);
      if (hook) (*hook)(l + 1, b_.host_view(x, n), T_);
    }
    PartTimer t(ForwardPart::Head, matrix_bytes({&w_.lm_head}));
    const bool keep = std::any_of(batch.begin(), batch.end(),
                                  [](const BatchItem& it) { return it.hidden != nullptr; });
    if (hook || keep) {  // HF's last hidden state is after the final norm
      b_.rmsnorm(x, w_.final_norm, T_, c_.dim, c_.rms_eps, xn);
      const float* normed = b_.host_view(xn, n);
      if (hook) (*hook)(c_.n_layers + 1, normed, T_);
      copy_hidden(batch, normed);
    }
    b_.logits(x, w_.final_norm, c_.rms_eps, w_.lm_head, rows);
  }

  // The MTP head (runtime/mtp_draft.h): fc([norm(embedding) | norm(hidden)]), one full-attention
  // decoder layer over the head's own KV (attention layer 0 of the call's cache), its final norm,
  // the model's output head.
  void run_mtp(const float* hidden, float* hidden_out, const WeightMatrix& head,
               const LogitRows& rows) {
    const MtpWeights& M = w_.mtp;
    float* x = b_.buf(Buf::X);
    float* xn = b_.buf(Buf::XN);
    float* h = b_.buf(Buf::MtpHidden);
    float* cat = b_.buf(Buf::MtpCat);
    const size_t n = size_t(T_) * size_t(c_.dim);
    b_.from_host(h, hidden, n);
    b_.embed(w_.embed, x);
    if (c_.embed_scale != 1.0f) b_.scale(x, n, c_.embed_scale);
    b_.rmsnorm(x, M.norm_embedding, T_, c_.dim, c_.rms_eps, xn);
    b_.rmsnorm(h, M.norm_hidden, T_, c_.dim, c_.rms_eps, h);
    b_.concat(xn, c_.dim, h, c_.dim, cat);  // the embedding first, as the checkpoints' fc reads
    b_.matmul(M.fc, cat, T_, x);
    decoder_layer(m_.layer_spec(-1), M.layer, 0, -1);  // full attention, the model's RoPE
    if (hidden_out) {
      b_.rmsnorm(x, M.final_norm, T_, c_.dim, c_.rms_eps, xn);
      std::copy_n(b_.host_view(xn, n), n, hidden_out);
    }
    b_.logits(x, M.final_norm, c_.rms_eps, head, rows);
  }

 private:
  // x += mixer(RMSNorm(x)); x += ffn(RMSNorm(x)). attention_layer: the layer's index among the
  // call cache's attention layers (full attention), layer: the model's index (Gated DeltaNet).
  void decoder_layer(const LayerSpec& s, const LayerWeights& L, int attention_layer, int layer) {
    float* x = b_.buf(Buf::X);
    float* xn = b_.buf(Buf::XN);
    float* out = b_.buf(Buf::Proj);
    const size_t n = size_t(T_) * size_t(c_.dim);
    {
      PartTimer t(ForwardPart::Norms);
      b_.rmsnorm(x, L.attn_norm, T_, c_.dim, c_.rms_eps, xn);
    }
    if (s.mixer == LayerKind::FullAttention) {
      attention_block(s.attention, L.attn, attention_layer, xn, out);
    } else {
      deltanet_block(L.delta, layer, xn, out);
    }
    {
      PartTimer t(ForwardPart::Norms);
      if (s.norms.sandwich) b_.rmsnorm(out, L.post_attn_norm, T_, c_.dim, c_.rms_eps, out);
      b_.add(x, out, n);
      b_.rmsnorm(x, L.mlp_norm, T_, c_.dim, c_.rms_eps, xn);
    }
    if (s.ffn.kind == FfnKind::Moe) {
      moe_block(s.ffn, L.moe, xn, out);
    } else {
      PartTimer t(ForwardPart::Mlp, mlp_bytes(L.mlp));
      mlp_block(s.ffn.act, L.mlp, xn, out);
    }
    PartTimer t(ForwardPart::Norms);
    if (s.norms.sandwich) b_.rmsnorm(out, L.post_mlp_norm, T_, c_.dim, c_.rms_eps, out);
    b_.add(x, out, n);
  }

  // The weight bytes one mlp_block call reads: each matrix once per kMlpCallTokens tokens.
  double mlp_bytes(const MlpWeights& M) const {
    return matrix_bytes({&M.gate, &M.up, &M.down}) *
           double((T_ + kMlpCallTokens - 1) / kMlpCallTokens);
  }

  // Causal self-attention over the paged KV cache; with an output gate (Qwen3.5) q_proj also
  // yields a per-head sigmoid gate on the attention output.
  void attention_block(const AttentionLayerSpec& s, const AttentionWeights& A, int al,
                       const float* xn, float* out) {
    const int hd = c_.head_dim, q_dim = c_.q_dim();
    float* q = b_.buf(Buf::Q);     // [T][n_heads][head_dim]
    float* k = b_.buf(Buf::K);     // [T][n_kv_heads][head_dim]
    float* v = b_.buf(Buf::V);     // [T][n_kv_heads][head_dim]
    float* o = b_.buf(Buf::Attn);  // [T][n_heads][head_dim]
    // q, k and v in one call (one fork and join, xn quantised once).
    std::optional<PartTimer> t;
    t.emplace(ForwardPart::AttnProj, matrix_bytes({&A.wq, &A.wk, &A.wv}));
    if (s.output_gate) {
      float* q2 = b_.buf(Buf::Q2);  // [T][n_heads][query | gate]
      const MatmulJob qkv[3] = {{&A.wq, xn, T_, q2}, {&A.wk, xn, T_, k}, {&A.wv, xn, T_, v}};
      b_.matmuls(qkv);
      b_.add_bias(q2, A.bq, T_);
      b_.split_gate(q2, c_.n_heads, hd, q, b_.buf(Buf::AttnGate));
    } else {
      const MatmulJob qkv[3] = {{&A.wq, xn, T_, q}, {&A.wk, xn, T_, k}, {&A.wv, xn, T_, v}};
      b_.matmuls(qkv);
      b_.add_bias(q, A.bq, T_);
    }
    b_.add_bias(k, A.bk, T_);
    b_.add_bias(v, A.bv, T_);
    if (s.qk_norm) {
      b_.rmsnorm(q, A.q_norm, T_ * c_.n_heads, hd, c_.rms_eps, q);
      b_.rmsnorm(k, A.k_norm, T_ * c_.n_kv_heads, hd, c_.rms_eps, k);
    }
    t.emplace(ForwardPart::Attention);
    b_.kv_store(al, KvPlane::Kraw, k);  // pre-RoPE keys, for quarantine's shift mode
    b_.rope(q, c_.n_heads, hd, s.rope_table);
    b_.rope(k, c_.n_kv_heads, hd, s.rope_table);
    b_.kv_store(al, KvPlane::K, k);
    b_.kv_store(al, KvPlane::V, v);
    AttentionSpec spec;
    spec.scale = s.scale;
    spec.window = s.window;
    spec.sinks = s.sinks ? &A.sinks : nullptr;
    b_.attention(al, q, c_.n_heads, c_.n_kv_heads, hd, spec, o);
    t.emplace(ForwardPart::AttnProj, matrix_bytes({&A.wo}));
    if (s.output_gate) b_.sigmoid_mul(o, b_.buf(Buf::AttnGate), size_t(T_) * size_t(q_dim));
    b_.matmul(A.wo, o, T_, out);
    b_.add_bias(out, A.bo, T_);
  }

  // Gated DeltaNet (ops/deltanet.h): projections, the conv + delta rule over each sequence's
  // recurrent state, a gated RMSNorm per value head, out_proj.
  void deltanet_block(const DeltaNetWeights& D, int layer, const float* xn, float* out) {
    PartTimer t(ForwardPart::DeltaNet, matrix_bytes({&D.in_proj_qkv, &D.in_proj_z, &D.in_proj_b,
                                                     &D.in_proj_a, &D.out_proj}));
    const DeltaNetParams p = deltanet_params(c_, D);
    float* qkv = b_.buf(Buf::DeltaQkv);    // [T][conv_dim] q | k | v
    float* z = b_.buf(Buf::DeltaZ);        // [T][value_dim] output gate
    float* beta = b_.buf(Buf::DeltaB);     // [T][n_v_heads]
    float* a = b_.buf(Buf::DeltaA);        // [T][n_v_heads]
    float* core = b_.buf(Buf::DeltaCore);  // [T][value_dim]
    // The four input projections in one call: one fork and join, xn quantised once, and the two
    // 32-row ones (too small to wake a thread for alone) shared out with the wide ones.
    const MatmulJob in[4] = {{&D.in_proj_qkv, xn, T_, qkv},
                             {&D.in_proj_z, xn, T_, z},
                             {&D.in_proj_b, xn, T_, beta},
                             {&D.in_proj_a, xn, T_, a}};
    b_.matmuls(in);
    b_.deltanet(p, layer, qkv, beta, a, core);
    // The gated norm's weight is used as stored (not zero-centred).
    b_.rmsnorm(core, D.norm, T_ * p.n_v_heads, p.v_head_dim, c_.rms_eps, core);
    b_.silu_gate(core, z, size_t(T_) * size_t(p.value_dim()));
    b_.matmul(D.out_proj, core, T_, out);
  }

  // Gated MLP: down(act(gate x) * up x), act SiLU (SwiGLU) or tanh-GELU (Gemma's GeGLU),
  // kMlpCallTokens tokens at a time (the same bits: a matmul's
  // rows do not depend on the others, ops/matmul.h), so its two widest buffers stay small.
  void mlp_block(Activation act, const MlpWeights& M, const float* xn, float* out) {
    const int hidden = int(M.gate.rows);
    float* g = b_.buf(Buf::Gate);  // [tokens][hidden]
    float* u = b_.buf(Buf::Up);    // [tokens][hidden]
    for (int t0 = 0; t0 < T_; t0 += kMlpCallTokens) {
      const int n = std::min(kMlpCallTokens, T_ - t0);
      const float* x = xn + size_t(t0) * size_t(c_.dim);
      float* y = out + size_t(t0) * size_t(c_.dim);
      const MatmulJob gate_up[2] = {{&M.gate, x, n, g}, {&M.up, x, n, u}};
      b_.matmuls(gate_up);
      b_.add_bias(g, M.b_gate, n);
      b_.add_bias(u, M.b_up, n);
      if (act == Activation::GeluTanh)
        b_.gelu_mul(g, u, size_t(n) * size_t(hidden), g);
      else
        b_.silu_mul(g, u, size_t(n) * size_t(hidden), g);
      b_.matmul(M.down, g, n, y);
      b_.add_bias(y, M.b_down, n);
    }
  }

  // Sparse MoE: a router (RouterKind: softmax over all experts, GLM's sigmoid with a selection bias
  // and groups, gpt-oss's softmax over the chosen) picks each token's top n_experts_used experts,
  // whose gated outputs (with gpt-oss's clamped SwiGLU and biases) are summed with the router
  // weights; Qwen3.5 MoE adds a shared expert scaled by sigmoid(shared_gate x), GLM an ungated one.
  void moe_block(const FfnSpec& s, const MoeWeights& M, const float* xn, float* out) {
    const int k = s.k;
    float* logits = b_.buf(Buf::Router);     // [T][n_experts]
    float* weight = b_.buf(Buf::MoeWeight);  // [T][k]
    std::optional<PartTimer> t;
    t.emplace(ForwardPart::Router, matrix_bytes({&M.router}));
    b_.matmul(M.router, xn, T_, logits);
    b_.add_bias(logits, M.router_logit_bias, T_);
    MoeRouting routing;
    routing.n_experts = s.n_experts;
    routing.k = k;
    routing.renorm = s.renorm;
    routing.kind = s.router;
    routing.bias = M.router_bias.empty() ? nullptr : &M.router_bias;
    routing.groups = s.groups;
    routing.groups_used = s.groups_used;
    routing.scale = s.routed_scale;
    b_.moe_route(logits, routing, weight);
    MoeExperts experts{M.gate, M.up, M.down};
    if (s.expert_biases) {
      experts.b_gate = &M.b_gate;
      experts.b_up = &M.b_up;
      experts.b_down = &M.b_down;
    }
    experts.act = s.expert_act;
    experts.alpha = s.clamp_alpha;
    experts.limit = s.clamp_limit;
    // One token reads its k experts; more read at most min(n, T k) (the routing decides).
    const double used = std::min(double(s.n_experts), double(T_) * double(k));
    t.emplace(ForwardPart::Experts, used * matrix_bytes({&M.gate[0], &M.up[0], &M.down[0]}));
    b_.moe_experts(experts, xn, k, weight, out);
    if (s.shared_hidden > 0) {
      t.emplace(ForwardPart::SharedExpert, mlp_bytes(M.shared) + matrix_bytes({&M.shared_gate}));
      float* shared = b_.buf(Buf::Shared);  // [T][dim]
      mlp_block(s.act, M.shared, xn, shared);
      if (s.shared_gated) {
        float* gate = b_.buf(Buf::SharedGate);  // [T][1]
        b_.matmul(M.shared_gate, xn, T_, gate);
        b_.add_gated(out, shared, gate, c_.dim);
      } else {
        b_.add(out, shared, size_t(T_) * size_t(c_.dim));
      }
    }
  }

  // Each item's rows of the normed last hidden state, to where it asked.
  void copy_hidden(std::span<const BatchItem> batch, const float* normed) {
    size_t t = 0;
    for (const BatchItem& it : batch) {
      const size_t rows = size_t(it.n_tokens) * size_t(c_.dim);
      if (it.hidden) std::copy_n(normed + t, rows, it.hidden);
      t += rows;
    }
  }

  const Model& m_;
  const ModelConfig& c_;
  const ModelWeights& w_;
  BackendCall& b_;
  int T_;
};

}  // namespace

void Model::rewind_state(RecurrentState& state, const DeltaNetTrail& trail, int n) const {
  check(trail.recorded && trail.before && n >= 0 && n <= trail.n_tokens &&
            trail.before->bytes() == state.bytes(),
        "rewind_state: no recorded call covers " + std::to_string(n) + " tokens");
  state.data = trail.before->data;
  if (n == 0) return;
  // The conv + delta rule of each DeltaNet layer again over the kept tokens' recorded inputs: the
  // same per-token operations as the call (ops/deltanet.cpp), so the same bits.
  const ModelConfig& c = config_;
  const size_t conv_dim = size_t(2 * c.linear_num_key_heads * c.linear_key_head_dim +
                                 c.linear_num_value_heads * c.linear_value_head_dim);
  const size_t nv = size_t(c.linear_num_value_heads);
  std::vector<float> conv(size_t(n) * conv_dim), beta(size_t(n) * nv), g(size_t(n) * nv),
      core(size_t(n) * nv * size_t(c.linear_value_head_dim));
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = weights_.layers[size_t(l)];
    if (L.kind != LayerKind::LinearAttention) continue;
    check(size_t(l) < trail.qkv.size() && trail.qkv[size_t(l)].size() >= size_t(n) * conv_dim,
          "rewind_state: the trail misses layer " + std::to_string(l));
    const DeltaNetSequence seq{&state, n};
    deltanet_core(deltanet_params(c, L.delta), l, {&seq, 1}, trail.qkv[size_t(l)].data(),
                  trail.b[size_t(l)].data(), trail.a[size_t(l)].data(),
                  {conv.data(), beta.data(), g.data()}, core.data());
  }
}

namespace {

// The tokens of a batch, checked against the model's limits.
int batch_tokens(const ModelConfig& c, std::span<const BatchItem> batch) {
  int T = 0;
  for (const BatchItem& it : batch) {
    if (it.n_tokens <= 0) fail("forward: empty batch item");
    if (it.start_pos + it.n_tokens > c.context_limit())
      fail("context of " + std::to_string(it.start_pos + it.n_tokens) +
           " tokens exceeds the model's maximum of " + std::to_string(c.context_limit()));
    for (int i = 0; i < it.n_tokens; ++i)
      if (it.tokens[i] < 0 || it.tokens[i] >= c.vocab)
        fail("token id " + std::to_string(it.tokens[i]) + " is outside the vocabulary (0.." +
             std::to_string(c.vocab - 1) + ")");
    T += it.n_tokens;
  }
  return T;
}

// A backend call over the batch, with each token's RoPE angles in every table the model has
// ([table][T][half]; each shared by the layers that use it).
std::unique_ptr<BackendCall> begin_call(const Backend& backend, const Model& model,
                                        std::span<const BatchItem> batch, KvCache& cache,
                                        const BufferSizes& sizes, int T) {
  const int half = model.rope().rotary_dim() / 2;
  const int tables = model.config().n_rope_tables();
  const size_t per_table = size_t(T) * size_t(half);
  std::vector<float> cos(size_t(tables) * per_table), sin(size_t(tables) * per_table);
  for (int table = 0; table < tables; ++table) {
    const Rope& rope = model.rope(table);
    size_t at = size_t(table) * per_table;
    for (const BatchItem& it : batch)
      for (int i = 0; i < it.n_tokens; ++i, at += size_t(half))
        rope.angles(it.start_pos + i, &cos[at], &sin[at]);
  }
  return backend.begin(batch, cache, sizes, std::move(cos), std::move(sin), half);
}

}  // namespace

void Model::forward(std::span<const BatchItem> batch, KvCache& cache,
                    const HiddenHook* hook) const {
  const int T = batch_tokens(config_, batch);
  if (T == 0) return;
  std::unique_ptr<BackendCall> call =
      begin_call(*backend_, *this, batch, cache, forward_buffer_sizes(config_, T), T);
  Pass(*this, *call, T).run(batch, hook, logit_rows(batch, config_.vocab));
  call->finish();
}

void Model::mtp_forward(std::span<const BatchItem> batch, KvCache& cache, const float* hidden,
                        float* hidden_out, int head_rows) const {
  check(config_.mtp_layers > 0, "mtp_forward: the model has no MTP head");
  check(cache.n_layers() == 1, "mtp_forward: the MTP head's cache has one attention layer");
  const int T = batch_tokens(config_, batch);
  if (T == 0) return;
  BufferSizes sizes = forward_buffer_sizes(config_, T);
  sizes[size_t(Buf::MtpHidden)] = size_t(T) * size_t(config_.dim);
  sizes[size_t(Buf::MtpCat)] = 2 * size_t(T) * size_t(config_.dim);
  std::unique_ptr<BackendCall> call = begin_call(*backend_, *this, batch, cache, sizes, T);
  // The first head_rows rows of the output head (whole 16-row panels where it is packed in them:
  // a panel group starts at row(16 g)). A device holds only the whole head.
  WeightMatrix head = weights_.lm_head;
  if (head_rows > 0 && head_rows < head.rows && device_.kind == DeviceKind::Cpu) {
    head.rows = std::min<int64_t>(head.rows, (int64_t(head_rows) + 15) / 16 * 16);
  }
  Pass(*this, *call, T).run_mtp(hidden, hidden_out, head, logit_rows(batch, int(head.rows)));
  call->finish();
}

void set_forward_profile(ForwardProfile* profile) {
  g_profile.store(profile, std::memory_order_relaxed);
}

const char* forward_part_name(ForwardPart p) {
  static constexpr const char* kNames[] = {"embed",         "norms", "attn_proj", "attention",
                                           "deltanet",      "mlp",   "router",    "experts",
                                           "shared_expert", "head"};
  static_assert(std::size(kNames) == size_t(ForwardPart::kCount));
  return kNames[size_t(p)];
}

}  // namespace fak
