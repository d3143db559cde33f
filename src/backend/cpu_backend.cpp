// The CPU backend: the forward's ops over host memory, with the kernels of ops/ (SIMD matmuls and
// attention, chosen once at start-up). Each call's buffers are the calling thread's, so several
// threads may run forward calls at once.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <span>

#include "backend/backend.h"
#include "core/error.h"
#include "memory/kv_storage.h"
#include "memory/recurrent_state.h"
#include "ops/attention.h"
#include "ops/ops.h"

namespace fak {

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

namespace {

// A thread's activation buffers, kept between calls (they only grow).
struct HostBuffers {
  std::array<std::vector<float>, size_t(Buf::kCount)> bufs;
  // A layer is either attention or Gated DeltaNet, so a hybrid's two sets of mixer buffers are
  // never live at once and share this one (Qwen3.5-35B-A3B, a 512-token prefill call: attention's
  // 21.5k floats a token overlaid on the delta rule's 28.9k, 43 MiB less).
  std::vector<float> mixers;
  std::array<float*, size_t(Buf::kCount)> at{};
  std::vector<int32_t> ids;
};

// The buffers of one mixer kind, which share HostBuffers::mixers with the other kind's.
constexpr Buf kAttentionBufs[] = {Buf::Q, Buf::Q2, Buf::K, Buf::V, Buf::Attn, Buf::AttnGate};
constexpr Buf kDeltaNetBufs[] = {Buf::DeltaQkv,  Buf::DeltaZ,    Buf::DeltaB,    Buf::DeltaA,
                                 Buf::DeltaCore, Buf::DeltaConv, Buf::DeltaBeta, Buf::DeltaG};

// Each buffer of `group` laid out one after another from offset 0, 64-byte aligned (in floats:
// offsets[b]); returns the floats the group takes.
size_t lay_out(std::span<const Buf> group, const BufferSizes& sizes,
               std::array<size_t, size_t(Buf::kCount)>& offsets) {
  size_t end = 0;
  for (Buf b : group) {
    offsets[size_t(b)] = end;
    end += (sizes[size_t(b)] + 15) / 16 * 16;
  }
  return end;
}

float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

class CpuCall final : public BackendCall {
 public:
  CpuCall(std::span<const BatchItem> batch, KvCache& cache, const BufferSizes& sizes,
          std::vector<float> cos, std::vector<float> sin, int half)
      : batch_(batch), cache_(cache), cos_(std::move(cos)), sin_(std::move(sin)), half_(half) {
    check(cache.storage().host_accessible(),
          "forward: the model runs on the CPU but its KV cache lives in " + cache.storage().name());
    // note: a reference to the thread_local, so OpenMP workers see the caller's buffers.
    thread_local HostBuffers tls;
    b_ = &tls;
    std::array<size_t, size_t(Buf::kCount)> offsets{};
    const size_t mixer_floats =
        std::max(lay_out(kAttentionBufs, sizes, offsets), lay_out(kDeltaNetBufs, sizes, offsets));
    if (b_->mixers.size() < mixer_floats) b_->mixers.resize(mixer_floats);
    std::array<bool, size_t(Buf::kCount)> shared{};
    for (Buf b : kAttentionBufs) shared[size_t(b)] = true;
    for (Buf b : kDeltaNetBufs) shared[size_t(b)] = true;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (shared[i]) {
        b_->at[i] = b_->mixers.data() + offsets[i];
        continue;
      }
      // The experts' buffers are moe_experts' own, by group (see there).
      if (i == size_t(Buf::MoeRows) || i == size_t(Buf::MoeGate) || i == size_t(Buf::MoeUp))
        continue;
      if (b_->bufs[i].size() < sizes[i]) b_->bufs[i].resize(sizes[i]);
      b_->at[i] = b_->bufs[i].data();
    }
    for (const BatchItem& it : batch) {
      for (int i = 0; i < it.n_tokens; ++i) {
        tokens_.push_back(it.tokens[i]);
        const int pos = it.start_pos + i;
        block_.push_back((*it.blocks)[size_t(pos / cache.block_size())]);
        slot_.push_back(pos % cache.block_size());
      }
    }
    T_ = int(tokens_.size());
  }

  float* buf(Buf b) override { return b_->at[size_t(b)]; }

  void embed(const WeightMatrix& table, float* x) override {
#pragma omp parallel for schedule(static) if (T_ >= 16)
    for (int t = 0; t < T_; ++t)
      dequantize_row(table, tokens_[size_t(t)], x + size_t(t) * size_t(table.cols));
  }

  void rmsnorm(const float* x, const std::vector<float>& w, int rows, int width, float eps,
               float* y) override {
    const size_t n = size_t(width);
#pragma omp parallel for schedule(static) if (rows > 4)
    for (int r = 0; r < rows; ++r)
      fak::rmsnorm(x + size_t(r) * n, w.data(), width, eps, y + size_t(r) * n);
  }

  void matmul(const WeightMatrix& w, const float* x, int rows, float* y) override {
    fak::matmul(w, x, rows, y);
  }

  void matmuls(std::span<const MatmulJob> jobs) override {
    fak::matmul_many(jobs);
  }

  void add_bias(float* y, const std::vector<float>& bias, int rows) override {
    if (bias.empty()) return;
    const int n = int(bias.size());
    for (int t = 0; t < rows; ++t) add_inplace(y + size_t(t) * size_t(n), bias.data(), n);
  }

  void add(float* x, const float* y, size_t n) override {
    add_inplace(x, y, int(n));
  }

  void silu_mul(const float* gate, const float* up, size_t n, float* out) override {
    fak::silu_mul(gate, up, int(n), out);
  }

  void gelu_mul(const float* gate, const float* up, size_t n, float* out) override {
    fak::gelu_tanh_mul(gate, up, int(n), out);
  }

  void scale(float* x, size_t n, float s) override {
    for (size_t i = 0; i < n; ++i) x[i] *= s;
  }

  // Both over T x width floats in a prefill (a scalar libm exp each, on one thread, was 3-5% of
  // a pp512 of the Qwen3.5 cut): the vector kernels' exp, threaded.
  void sigmoid_mul(float* x, const float* gate, size_t n) override {
    fak::sigmoid_mul(x, gate, int(n));
  }

  void silu_gate(float* x, const float* z, size_t n) override {
    fak::silu_mul(z, x, int(n), x);  // x silu(z): silu(z) x, the same product
  }

  void split_gate(const float* q2, int heads, int head_dim, float* q, float* gate) override {
    const size_t hd = size_t(head_dim);
    for (int t = 0; t < T_; ++t)
      for (int h = 0; h < heads; ++h) {
        const float* src = q2 + (size_t(t) * size_t(heads) + size_t(h)) * 2 * hd;
        const size_t at = (size_t(t) * size_t(heads) + size_t(h)) * hd;
        std::memcpy(q + at, src, sizeof(float) * hd);
        std::memcpy(gate + at, src + hd, sizeof(float) * hd);
      }
  }

  void rope(float* x, int heads, int head_dim, int table) override {
    const size_t row = size_t(heads) * size_t(head_dim);
    const size_t base = size_t(table) * size_t(T_) * size_t(half_);
    check(base + size_t(T_) * size_t(half_) <= cos_.size(), "forward: no such RoPE table");
    for (int t = 0; t < T_; ++t) {
      const float* cs = &cos_[base + size_t(t) * size_t(half_)];
      const float* sn = &sin_[base + size_t(t) * size_t(half_)];
      for (int h = 0; h < heads; ++h)
        rope_apply(x + size_t(t) * row + size_t(h) * size_t(head_dim), 2 * half_, cs, sn);
    }
  }

  void kv_store(int attn_layer, KvPlane plane, const float* rows) override {
    const size_t n = size_t(cache_.kv_dim());
    for (int t = 0; t < T_; ++t)
      cache_.store_row(block_[size_t(t)], attn_layer, plane, slot_[size_t(t)],
                       rows + size_t(t) * n);
  }

  void attention(int attn_layer, const float* q, int n_heads, int n_kv_heads, int head_dim,
                 const AttentionSpec& spec, float* out) override {
    const size_t q_dim = size_t(n_heads) * size_t(head_dim);
    std::vector<AttentionTask> tasks;
    size_t t = 0;
    for (const BatchItem& it : batch_) {
      tasks.push_back({q + t * q_dim, out + t * q_dim, it.blocks, it.n_tokens, it.start_pos});
      t += size_t(it.n_tokens);
    }
    AttentionShape shape{n_heads, n_kv_heads, head_dim, spec.scale, spec.window};
    shape.sinks = spec.sinks ? spec.sinks->data() : nullptr;
    fak::attention(tasks, cache_, attn_layer, shape);
  }

  void deltanet(const DeltaNetParams& p, int layer, const float* qkv, const float* b,
                const float* a, float* core) override {
    std::vector<DeltaNetSequence> seqs;
    size_t t = 0;
    for (const BatchItem& it : batch_) {
      seqs.push_back({it.state, it.n_tokens});
      if (DeltaNetTrail* tr = it.trail) {
        const size_t cd = size_t(p.conv_dim()), nv = size_t(p.n_v_heads), n = size_t(it.n_tokens);
        const size_t layers = it.state->slot.size();
        if (tr->qkv.size() != layers)
          tr->qkv.resize(layers), tr->b.resize(layers), tr->a.resize(layers);
        tr->qkv[size_t(layer)].assign(qkv + t * cd, qkv + (t + n) * cd);
        tr->b[size_t(layer)].assign(b + t * nv, b + (t + n) * nv);
        tr->a[size_t(layer)].assign(a + t * nv, a + (t + n) * nv);
        tr->n_tokens = it.n_tokens;
        tr->recorded = true;
      }
      t += size_t(it.n_tokens);
    }
    deltanet_core(p, layer, seqs, qkv, b, a,
                  {buf(Buf::DeltaConv), buf(Buf::DeltaBeta), buf(Buf::DeltaG)}, core);
  }

  void moe_route(const float* logits, const MoeRouting& r, float* weights) override {
    const int n_experts = r.n_experts, k = r.k;
    b_->ids.resize(size_t(T_) * size_t(k));
    int32_t* ids = b_->ids.data();
#pragma omp parallel for schedule(static) if (T_ > 16)
    for (int t = 0; t < T_; ++t) {
      const float* l = logits + size_t(t) * size_t(n_experts);
      int32_t* id = ids + size_t(t) * size_t(k);
      float* w = weights + size_t(t) * size_t(k);
      if (r.kind == RouterKind::Sigmoid)
        route_token_sigmoid(l, r, id, w);
      else if (r.kind == RouterKind::SoftmaxChosen)
        route_token_chosen(l, n_experts, k, id, w);
      else
        route_token(l, n_experts, k, r.renorm, id, w);
    }
  }

  void moe_experts(const MoeExperts& e, const float* x, int k, const float* weights,
                   float* out) override;

  void add_gated(float* out, const float* y, const float* gate, int width) override {
    for (int t = 0; t < T_; ++t) {
      const float s = sigmoid(gate[t]);
      float* o = out + size_t(t) * size_t(width);
      const float* v = y + size_t(t) * size_t(width);
      for (int d = 0; d < width; ++d) o[d] += s * v[d];
    }
  }

  void logits(const float* x, const std::vector<float>& norm, float eps, const WeightMatrix& head,
              const LogitRows& rows) override {
    if (rows.rows.empty()) return;
    const size_t D = size_t(head.cols), R = rows.rows.size(), vocab = size_t(head.rows);
    thread_local std::vector<float> normed, out;
    normed.resize(R * D);
    for (size_t i = 0; i < R; ++i)
      fak::rmsnorm(x + size_t(rows.rows[i]) * D, norm.data(), int(D), eps, &normed[i * D]);
    // Logits of consecutive rows land in consecutive outputs only within an item; compute into a
    // temporary when outputs are scattered. One row (decode) goes straight to its output: the
    // temporary was a 600 KB allocation and copy a token on a 151,936-token vocabulary.
    if (R == 1) return fak::matmul(head, normed.data(), 1, rows.outs[0]);
    out.resize(R * vocab);
    fak::matmul(head, normed.data(), int(R), out.data());
    for (size_t i = 0; i < R; ++i)
      std::memcpy(rows.outs[i], &out[i * vocab], sizeof(float) * vocab);
  }

  const float* host_view(const float* x, size_t) override {
    return x;
  }
  void from_host(float* dst, const float* src, size_t n) override {
    std::memcpy(dst, src, n * sizeof(float));
  }
  void concat(const float* a, int width_a, const float* b, int width_b, float* out) override {
    const size_t wa = size_t(width_a), wb = size_t(width_b);
    for (size_t t = 0; t < size_t(T_); ++t) {
      std::memcpy(out + t * (wa + wb), a + t * wa, wa * sizeof(float));
      std::memcpy(out + t * (wa + wb) + wa, b + t * wb, wb * sizeof(float));
    }
  }
  void finish() override {}

 private:
  // Softmax over the experts (its sum in double), the k most probable (ties to the lower id, as
  // a stable sort), renormalised. note: one token's choice reads only its own logits.
  // The k highest scores' indices, best first, ties to the lower index (a stable sort's order).
  static void top_k(const float* score, int n, int k, int32_t* ids) {
    for (int j = 0; j < k; ++j) {
      int best = -1;
      for (int e = 0; e < n; ++e) {
        bool taken = false;
        for (int i = 0; i < j; ++i) taken |= ids[i] == e;
        if (!taken && (best < 0 || score[e] > score[best])) best = e;
      }
      ids[j] = best;
    }
  }

  // GLM-4.5's router (transformers Glm4MoeMoE.route_tokens_to_experts): sigmoid scores; the
  // choice reads score + bias: the groups_used groups whose two best sum highest, then the k best
  // experts in them (ties to the lower id); the weights are the chosen scores without the bias,
  // renormalised (+ 1e-20, as transformers) and scaled. note: one token's choice reads only its
  // own logits.
  static void route_token_sigmoid(const float* logit, const MoeRouting& r, int32_t* ids, float* w) {
    const int n = r.n_experts, per = n / r.groups;
    thread_local std::vector<float> score, choice;
    thread_local std::vector<char> allowed;
    score.resize(size_t(n));
    choice.resize(size_t(n));
    for (int e = 0; e < n; ++e) {
      score[size_t(e)] = 1.0f / (1.0f + std::exp(-logit[e]));
      choice[size_t(e)] = score[size_t(e)] + (r.bias ? (*r.bias)[size_t(e)] : 0.0f);
    }
    allowed.assign(size_t(n), r.groups <= 1 ? 1 : 0);
    if (r.groups > 1) {
      std::vector<float> group_score(size_t(r.groups));
      for (int g = 0; g < r.groups; ++g) {
        float best = -INFINITY, second = -INFINITY;
        for (int e = g * per; e < (g + 1) * per; ++e) {
          const float v = choice[size_t(e)];
          if (v > best) {
            second = best;
            best = v;
          } else if (v > second) {
            second = v;
          }
        }
        group_score[size_t(g)] = best + second;
      }
      for (int j = 0; j < r.groups_used; ++j) {
        int bg = -1;
        for (int g = 0; g < r.groups; ++g)
          if (!allowed[size_t(g * per)] &&
              (bg < 0 || group_score[size_t(g)] > group_score[size_t(bg)]))
            bg = g;
        for (int e = bg * per; e < (bg + 1) * per; ++e) allowed[size_t(e)] = 1;
      }
    }
    // Experts outside the chosen groups compete with a score of 0, as transformers masks them
    // (llama.cpp masks with -inf: the same choice wherever the chosen scores are positive).
    for (int e = 0; e < n; ++e)
      if (!allowed[size_t(e)]) choice[size_t(e)] = 0.0f;
    top_k(choice.data(), n, r.k, ids);
    double sum = 0;
    for (int j = 0; j < r.k; ++j) sum += double(w[j] = score[size_t(ids[j])]);
    const float denom = r.renorm ? float(sum) + 1e-20f : 1.0f;
    for (int j = 0; j < r.k; ++j) w[j] = w[j] / denom * r.scale;
  }

  // gpt-oss's router (transformers GptOssTopKRouter): the k highest logits (ties to the lower id),
  // then a softmax over those k alone (its sum in double).
  static void route_token_chosen(const float* logit, int n, int k, int32_t* ids, float* w) {
    top_k(logit, n, k, ids);
    const float max = logit[ids[0]];
    double sum = 0;
    for (int j = 0; j < k; ++j) sum += double(w[j] = std::exp(logit[ids[j]] - max));
    const float inv = float(1.0 / sum);
    for (int j = 0; j < k; ++j) w[j] *= inv;
  }

  static void route_token(const float* logit, int n, int k, bool renorm, int32_t* ids, float* w) {
    float max = logit[0];
    for (int e = 1; e < n; ++e) max = std::max(max, logit[e]);
    thread_local std::vector<float> p;
    p.resize(size_t(n));
    double sum = 0;
    for (int e = 0; e < n; ++e) sum += double(p[size_t(e)] = std::exp(logit[e] - max));
    const float inv = float(1.0 / sum);
    for (int e = 0; e < n; ++e) p[size_t(e)] *= inv;
    top_k(p.data(), n, k, ids);
    for (int j = 0; j < k; ++j) w[j] = p[size_t(ids[j])];
    if (renorm) {
      float s = 0;
      for (int j = 0; j < k; ++j) s += w[j];
      for (int j = 0; j < k; ++j) w[j] /= s;
    }
  }

  std::span<const BatchItem> batch_;
  KvCache& cache_;
  HostBuffers* b_ = nullptr;
  std::vector<float> cos_, sin_;
  int half_;
  int T_ = 0;
  std::vector<int32_t> tokens_, block_, slot_;
};

// Each expert's tokens taken as one matrix (their rows, quantised once for all experts), so an
// expert's weights are read once per call (one GEMM over its tokens when prefilling, a GEMV of its
// rows alone when decoding), then each token's outputs added up in expert order. note: a row's
// result depends on that row alone (see ops/matmul.h), and a token's sum on its own experts alone,
// so grouping changes no bit.
//
// The experts go in groups of whole experts, about kMoeGroupPairs (token, expert) pairs each, so
// the gates, ups and outputs of a prefill call's pairs are never all held at once (a 512-token call
// of GLM-4.5-Air's 8 of 128 experts: 108 MiB with the inputs, as once held; in groups, 14). The
// forward's MoeRows / MoeGate / MoeUp buffers are the CUDA backend's; these are the CPU's own.
void CpuCall::moe_experts(const MoeExperts& ex, const float* x, int k, const float* weights,
                          float* out) {
  constexpr size_t kMoeGroupPairs = 512;
  const std::span<const WeightMatrix> gate = ex.gate, up = ex.up, down = ex.down;
  const int n_experts = int(gate.size());
  const int32_t* ids = b_->ids.data();
  const size_t D = size_t(down.front().rows), I = size_t(gate.front().rows);
  // The (token, rank) pairs grouped by expert, each group in token order.
  std::vector<int32_t> first(size_t(n_experts) + 1, 0), pairs(size_t(T_) * size_t(k));
  for (size_t i = 0; i < pairs.size(); ++i) ++first[size_t(ids[i]) + 1];
  size_t widest = 0;  // the most pairs one expert has
  for (int e = 0; e < n_experts; ++e) {
    widest = std::max(widest, size_t(first[size_t(e) + 1]));
    first[size_t(e) + 1] += first[size_t(e)];
  }
  {
    std::vector<int32_t> at(first.begin(), first.end() - 1);
    for (size_t i = 0; i < pairs.size(); ++i) pairs[size_t(at[size_t(ids[i])]++)] = int32_t(i);
  }
  const size_t cap = std::min(pairs.size(), std::max(kMoeGroupPairs, widest));
  thread_local std::vector<float> rows_buf, gate_buf, up_buf;
  if (rows_buf.size() < cap * D) rows_buf.resize(cap * D);
  if (gate_buf.size() < cap * I) gate_buf.resize(cap * I);
  if (up_buf.size() < cap * I) up_buf.resize(cap * I);
  float* g = gate_buf.data();   // [pairs][expert_hidden]
  float* u = up_buf.data();     // [pairs][expert_hidden]
  float* ys = rows_buf.data();  // [pairs][dim] a group's outputs
  std::memset(out, 0, sizeof(float) * size_t(T_) * D);
  // Prefill: every token's row quantised once for all of its experts (8 copies quantised apiece
  // were 5% of a pp512 on the Qwen3-30B-A3B Q8_0 cut), and the token each pair reads.
  std::unique_ptr<QuantizedRows> xq;
  std::vector<int32_t> token_of(pairs.size());
  for (size_t r = 0; r < pairs.size(); ++r) token_of[r] = pairs[r] / k;
  if (T_ > 1) xq = std::make_unique<QuantizedRows>(gate.front().type, x, T_, int64_t(D));
  thread_local std::vector<MatmulJob> jobs;
  // Each row's expert's biases (gpt-oss).
  auto add_expert_bias = [&](float* rows, const std::vector<float>* bias, size_t width, int e0,
                             int e1) {
    if (!bias) return;
    for (int e = e0; e < e1; ++e)
      for (int32_t r = first[size_t(e)]; r < first[size_t(e) + 1]; ++r) {
        float* y = rows + size_t(r - first[size_t(e0)]) * width;
        const float* b = bias->data() + size_t(e) * width;
        for (size_t i = 0; i < width; ++i) y[i] += b[i];
      }
  };
  for (int e0 = 0; e0 < n_experts;) {
    int e1 = e0;
    while (e1 < n_experts && size_t(first[size_t(e1) + 1] - first[size_t(e0)]) <= cap) ++e1;
    const size_t base = size_t(first[size_t(e0)]), n_rows = size_t(first[size_t(e1)]) - base;
    if (n_rows > 0) {
      // The group's gates and ups in one parallel region, then its downs in another. An expert
      // takes its tokens by row: quantised once above (prefill), or the one token's row where it
      // is (decode: every expert reads the same row, and matmul_many quantises it once).
      jobs.clear();
      for (int e = e0; e < e1; ++e) {
        const size_t r0 = size_t(first[size_t(e)]) - base;
        const int n = first[size_t(e) + 1] - first[size_t(e)];
        if (n == 0) continue;
        const int32_t* rows = token_of.data() + first[size_t(e)];
        for (const WeightMatrix* w : {&gate[size_t(e)], &up[size_t(e)]})
          jobs.push_back(
              T_ > 1 ? MatmulJob{w, x, n, (w == &gate[size_t(e)] ? g : u) + r0 * I, rows, xq.get()}
                     : MatmulJob{w, x, n, (w == &gate[size_t(e)] ? g : u) + r0 * I});
      }
      matmul_many(jobs);
      add_expert_bias(g, ex.b_gate, I, e0, e1);
      add_expert_bias(u, ex.b_up, I, e0, e1);
      if (ex.act == Activation::ClampedSwiglu)
        fak::clamped_swiglu_mul(g, u, int(n_rows * I), ex.alpha, ex.limit, g);
      else
        fak::silu_mul(g, u, int(n_rows * I), g);
      jobs.clear();
      for (int e = e0; e < e1; ++e) {
        const size_t r0 = size_t(first[size_t(e)]) - base;
        const int n = first[size_t(e) + 1] - first[size_t(e)];
        if (n > 0) jobs.push_back({&down[size_t(e)], g + r0 * I, n, ys + r0 * D});
      }
      matmul_many(jobs);
      add_expert_bias(ys, ex.b_down, D, e0, e1);
      // Each token's experts come in ascending order, group after group. The threads take slices
      // of the hidden dimension, each over every row in that order, so no output is shared.
      const int slices = n_rows > 64 ? 4 * omp_get_max_threads() : 1;
#pragma omp parallel for schedule(static) if (slices > 1)
      for (int slice = 0; slice < slices; ++slice) {
        const size_t d0 = D * size_t(slice) / size_t(slices) / 16 * 16;
        const size_t d1 =
            slice + 1 == slices ? D : D * size_t(slice + 1) / size_t(slices) / 16 * 16;
        for (size_t r = 0; r < n_rows; ++r) {
          const int32_t pair = pairs[base + r];
          // o and y never overlap: vectorised (a float at a time, GCC's -O2 left it, 3% of a
          // pp512 of the Qwen3.5 Q8_0 cut); a multiply then an add per element either way.
          float* o = out + size_t(pair / k) * D;
          const float w = weights[size_t(pair)];
          const float* y = ys + r * D;
#pragma omp simd
          for (size_t d = d0; d < d1; ++d) o[d] += w * y[d];
        }
      }
    }
    e0 = e1;
  }
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  std::shared_ptr<KvStorage> kv_storage() const override { return host_kv_storage(); }
  void upload(const WeightMatrix&) override {}
  void upload(const std::vector<float>&) override {}
  size_t weight_bytes() const override { return 0; }
  std::string unsupported(const ForwardSpec&) const override { return ""; }
  void check_shapes(int, int, int) const override {}
  void reserve(const BufferSizes&, int, int, int) const override {}
  std::unique_ptr<BackendCall> begin(std::span<const BatchItem> batch, KvCache& cache,
                                     const BufferSizes& sizes, std::vector<float> cos,
                                     std::vector<float> sin, int half) const override {
    return std::make_unique<CpuCall>(batch, cache, sizes, std::move(cos), std::move(sin), half);
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<CpuBackend>();
}

}  // namespace fak
