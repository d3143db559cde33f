// The per-op seam the forward pass is written over (models/forward.cpp): one forward, two
// implementations of its ops, the CPU's (backend/cpu_backend.cpp, over ops/) and CUDA's
// (cuda/cuda_backend.cpp, over cuda/ kernels), chosen when a model is loaded.
//
// A forward call opens a BackendCall for its batch: the call owns the batch's activation buffers
// (host or device memory; the forward only passes their pointers from op to op), knows where each
// token's KV goes and its RoPE angles, and carries the hybrid models' recurrent states.
//
// note: every op computes each output row from that row's inputs alone, in an order that does not
// depend on the batch (matmul rows, a query's attention, a token's experts in a fixed order), so a
// prefix-cache hit, a replay after an eviction and a batched decode step reproduce a cold run bit
// for bit on either backend (each its own bits).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "memory/kv_cache.h"
#include "ops/deltanet.h"
#include "ops/matmul.h"
#include "ops/specs.h"

namespace fak {

class KvStorage;
struct RecurrentState;

// One sequence's part of a forward call. Its KV blocks must already cover positions
// [start_pos, start_pos + n_tokens) and be exclusively owned (refcount 1) where they are written.
struct BatchItem {
  const std::vector<int32_t>* blocks = nullptr;  // block table of the sequence
  RecurrentState* state = nullptr;  // hybrid models: conv + recurrent state, updated in place
  const int32_t* tokens = nullptr;
  int n_tokens = 0;
  int start_pos = 0;
  // Logits output: [n_tokens][vocab] when all_logits, else [vocab] for the last token. May be null.
  float* logits = nullptr;
  bool all_logits = false;
  DeltaNetTrail* trail = nullptr;  // hybrid models: record the DeltaNet inputs (ops/deltanet.h)
  // Host output [n_tokens][dim]: each token's last hidden state (after the final norm), which the
  // MTP head drafts from. May be null.
  float* hidden = nullptr;
};

// The batch rows whose logits someone asked for (token index within the batch: the last token of
// an item, or all of its tokens with all_logits) and where each row's logits go.
struct LogitRows {
  std::vector<int32_t> rows;
  std::vector<float*> outs;
};
LogitRows logit_rows(std::span<const BatchItem> batch, int vocab);

// A forward call's activation buffers, each [T][width] f32 (models/forward.cpp sizes them).
enum class Buf : uint8_t {
  X,           // residual stream [T][dim]
  XN,          // normed input of a block [T][dim]
  Q,           // queries [T][q_dim]
  Q2,          // gated attention's q_proj output [T][2 q_dim]
  K,           // keys [T][kv_dim]
  V,           // values [T][kv_dim]
  Attn,        // attention output [T][q_dim]
  AttnGate,    // gated attention's gate [T][q_dim]
  Proj,        // a block's output [T][dim]
  Gate,        // MLP gate [T][hidden]
  Up,          // MLP up [T][hidden]
  DeltaQkv,    // DeltaNet in_proj_qkv [T][conv_dim]
  DeltaZ,      // DeltaNet gate z [T][value_dim]
  DeltaB,      // DeltaNet beta logits [T][n_v_heads]
  DeltaA,      // DeltaNet decay inputs [T][n_v_heads]
  DeltaCore,   // DeltaNet output before its norm [T][value_dim]
  DeltaConv,   // DeltaNet conv + SiLU output [T][conv_dim]
  DeltaBeta,   // DeltaNet beta [T][n_v_heads]
  DeltaG,      // DeltaNet log decay [T][n_v_heads]
  Router,      // MoE router logits [T][n_experts]
  MoeWeight,   // each token's chosen experts' weights [T][k]
  MoeRows,     // the inputs of each (token, expert) pair, grouped by expert [T k][dim]
  MoeGate,     // their experts' gate [T k][expert_hidden]
  MoeUp,       // their experts' up [T k][expert_hidden]
  MoeOut,      // their experts' outputs, grouped by expert [T k][dim]
  MoeSlots,    // the same by token and rank [T][k][dim]
  Shared,      // MoE shared expert output [T][dim]
  SharedGate,  // MoE shared expert gate logit [T][1]
  MtpHidden,   // the MTP head's input hidden states [T][dim]
  MtpCat,      // its [embedding | hidden] rows, normed [T][2 dim]
  kCount,
};
using BufferSizes = std::array<size_t, size_t(Buf::kCount)>;  // floats per buffer

// What an attention layer computes beyond its shapes.
struct AttentionSpec {
  float scale = 1.0f;  // of q.k
  int window = 0;      // > 0: each token attends to the last `window` positions only
  // [n_heads] or null: each head's sink logit joins its softmax as a key without a value
  // (gpt-oss), so the weights of the real keys sum to less than 1.
  const std::vector<float>* sinks = nullptr;
};

// How moe_route picks each token's experts. Softmax: the k most probable (ties to the lower id),
// renormalised to sum to 1 when `renorm`. Sigmoid (GLM-4.5): each expert's sigmoid, chosen by
// sigmoid + bias within the groups_used best of `groups` groups (a group's score: the sum of its
// two best), the chosen sigmoids renormalised when `renorm`, then times `scale`.
struct MoeRouting {
  int n_experts = 0, k = 0;
  bool renorm = true;
  RouterKind kind = RouterKind::Softmax;
  const std::vector<float>* bias = nullptr;  // sigmoid: e_score_correction_bias
  int groups = 1, groups_used = 1;
  float scale = 1.0f;
};

// A MoE layer's experts for moe_experts: one matrix per expert, optional biases ([n_experts][width]
// each: gpt-oss) and the activation of gate and up (SwiGLU, or gpt-oss's clamped one).
struct MoeExperts {
  std::span<const WeightMatrix> gate, up, down;
  const std::vector<float>* b_gate = nullptr;
  const std::vector<float>* b_up = nullptr;
  const std::vector<float>* b_down = nullptr;
  Activation act = Activation::Silu;
  float alpha = 1.702f, limit = 7.0f;  // ClampedSwiglu
};

// One forward call's ops. Pointers are buf() memory of this call unless said otherwise; `rows` is
// the call's token count where an op does not say.
class BackendCall {
 public:
  virtual ~BackendCall() = default;
  virtual float* buf(Buf b) = 0;

  // x[t] = row tokens[t] of the embedding table.
  virtual void embed(const WeightMatrix& table, float* x) = 0;
  // y[r] = x[r] / rms(x[r]) * w, for `rows` rows of `width` (in place is fine).
  virtual void rmsnorm(const float* x, const std::vector<float>& w, int rows, int width, float eps,
                       float* y) = 0;
  // y[t] = W x[t] for `rows` rows.
  virtual void matmul(const WeightMatrix& w, const float* x, int rows, float* y) = 0;
  // Several products at once (q, k and v of one input; an MLP's gate and up), each the same bits
  // as matmul alone: on the CPU one fork and join for all (ops/matmul.h matmul_many), and the input
  // quantised once for the jobs that share it.
  virtual void matmuls(std::span<const MatmulJob> jobs) = 0;
  virtual void add_bias(float* y, const std::vector<float>& bias, int rows) = 0;
  virtual void add(float* x, const float* y, size_t n) = 0;  // x += y
  virtual void silu_mul(const float* gate, const float* up, size_t n, float* out) = 0;
  // out = gelu_tanh(gate) * up (GeGLU, PyTorch's tanh approximation).
  virtual void gelu_mul(const float* gate, const float* up, size_t n, float* out) = 0;
  virtual void scale(float* x, size_t n, float s) = 0;                  // x *= s
  virtual void sigmoid_mul(float* x, const float* gate, size_t n) = 0;  // x *= sigmoid(gate)
  virtual void silu_gate(float* x, const float* z, size_t n) = 0;       // x *= silu(z)
  // q2 [T][heads][2 head_dim] holds per head the query then the gate; they go to q and gate.
  virtual void split_gate(const float* q2, int heads, int head_dim, float* q, float* gate) = 0;
  // Rotates the first rotary dims of each of `heads` heads of every token at its position, with
  // RoPE table `table` (0, or 1 for a model's local layers: ModelConfig::rope_table).
  virtual void rope(float* x, int heads, int head_dim, int table) = 0;
  // Writes rows [T][kv_dim] into `plane` of attention layer `attn_layer` at the tokens' places.
  virtual void kv_store(int attn_layer, KvPlane plane, const float* rows) = 0;
  // Causal GQA attention of q [T][n_heads][head_dim] over each token's sequence up to its position,
  // as `spec` says (scale, sliding window, sinks).
  virtual void attention(int attn_layer, const float* q, int n_heads, int n_kv_heads, int head_dim,
                         const AttentionSpec& spec, float* out) = 0;
  // Gated DeltaNet's core for model layer `layer` (ops/deltanet.h): the causal conv + SiLU over
  // qkv [T][conv_dim], q/k L2 norms, the gates from b and a [T][n_v_heads], and the delta rule
  // over each item's recurrent state; core [T][value_dim].
  virtual void deltanet(const DeltaNetParams& p, int layer, const float* qkv, const float* b,
                        const float* a, float* core) = 0;
  // MoE routing of logits [T][n_experts] (MoeRouting): the k chosen ids per token stay with the
  // call for moe_experts, their weights go to `weights` [T][k].
  virtual void moe_route(const float* logits, const MoeRouting& r, float* weights) = 0;
  // out[t] = sum over j < k of weights[t][j] x down_e(act(gate_e x[t], up_e x[t])), e = the
  // token's j-th chosen expert (MoeExperts: the matrices, their biases, the activation), summed in
  // an order fixed by the token's own experts (CPU: ascending expert id; CUDA: rank order): only
  // the chosen experts are read, each once per call for all the tokens routed to it.
  virtual void moe_experts(const MoeExperts& e, const float* x, int k, const float* weights,
                           float* out) = 0;
  // out[t] += sigmoid(gate[t]) * y[t], rows of `width`.
  virtual void add_gated(float* out, const float* y, const float* gate, int width) = 0;
  // Logits of the rows asked for: final norm then the output head, into each row's host output.
  virtual void logits(const float* x, const std::vector<float>& norm, float eps,
                      const WeightMatrix& head, const LogitRows& rows) = 0;
  // x's first n floats readable on the host (a copy from a device), for hidden-state hooks.
  virtual const float* host_view(const float* x, size_t n) = 0;
  // n floats from host memory into a buffer of this call.
  virtual void from_host(float* dst, const float* src, size_t n) = 0;
  // out[t] = [a[t] | b[t]]: rows of width_a and width_b side by side.
  virtual void concat(const float* a, int width_a, const float* b, int width_b, float* out) = 0;
  // Ends the call: recurrent states are written back (a device's come home), nothing before.
  virtual void finish() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda:0"
  // Where caches for this backend must keep their slabs.
  virtual std::shared_ptr<KvStorage> kv_storage() const = 0;
  // Weights the backend needs a copy of (in a device's memory): called once per tensor at load.
  // The embedding table is not offered unless it is also the output head: lookups read it on the
  // host.
  virtual void upload(const WeightMatrix& m) = 0;
  virtual void upload(const std::vector<float>& v) = 0;
  virtual size_t weight_bytes() const = 0;  // device bytes of the uploaded weights
  // Empty when this backend's kernels can run every op of `forward`; otherwise what they lack,
  // named for an error ("layer 0: sliding-window attention").
  virtual std::string unsupported(const ForwardSpec& forward) const = 0;
  // Throws naming what this backend's kernels cannot run (a head wider than they take, ...).
  virtual void check_shapes(int head_dim, int conv_kernel, int v_head_dim) const = 0;
  // Allocates the buffers of a call of these sizes (and `logit_rows` rows of `vocab` logits) now,
  // so a memory budget planned afterwards leaves them room; a no-op on the host.
  virtual void reserve(const BufferSizes& sizes, int tokens, int logit_rows, int vocab) const = 0;
  // Opens a forward call over `batch`: positions and KV places from the items, RoPE angles
  // cos/sin [tables][T][half] from the caller (one table, or a model's global then local one).
  virtual std::unique_ptr<BackendCall> begin(std::span<const BatchItem> batch, KvCache& cache,
                                             const BufferSizes& sizes, std::vector<float> cos,
                                             std::vector<float> sin, int half) const = 0;
};

// The CPU backend (ops/ kernels over host memory).
std::unique_ptr<Backend> make_cpu_backend();
// The CUDA backend on GPU `index` (cuda/cuda_backend.cpp); a build without CUDA throws saying so.
std::unique_ptr<Backend> make_cuda_backend(int index);

}  // namespace fak
