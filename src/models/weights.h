// The weights of a model, as views into the mapped file(s). Norm weights and biases are small and
// are widened to f32 once at load (with the 1 + w transform for zero-centred norms); matrices stay
// in their stored type and are widened inside the matmul kernels.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/config.h"
#include "ops/matmul.h"

namespace fak {

class TensorStore;

struct AttentionWeights {
  WeightMatrix wq, wk, wv, wo;        // wq is [q_dim (x2 with an output gate), dim]
  std::vector<float> bq, bk, bv, bo;  // empty when the model has no biases
  std::vector<float> q_norm, k_norm;  // [head_dim], empty without qk_norm
  std::vector<float> sinks;           // [n_heads] attention sinks' logits, empty without
};

// Gated DeltaNet (Qwen3.5 linear attention) — filled by the hybrid family loader.
struct DeltaNetWeights {
  WeightMatrix in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj;
  std::vector<float> conv1d;   // [conv_dim][kernel]
  std::vector<float> dt_bias;  // [n_v_heads]
  // [n_v_heads] -exp(A_log), rounded to f32 once at load: the form llama.cpp stores (ssm_a), so
  // an HF checkpoint and its GGUF compute the same decay bit for bit.
  std::vector<float> ssm_a;
  std::vector<float> norm;  // [v_head_dim] gated RMSNorm weight (not zero-centred)
  // Every value-head tensor above in llama.cpp's tiled order, as the GGUF stores it (a K-quant
  // out_proj: its 256-element blocks straddle 128-wide heads, so its columns cannot be moved back
  // and the layer computes in the file's order instead; DeltaNetParams::tiled_v_heads).
  bool tiled_v_heads = false;
};

struct MlpWeights {
  WeightMatrix gate, up, down;
  std::vector<float> b_gate, b_up, b_down;
};

// A sparse MoE block: a router and n_experts SwiGLU experts (views into the file's tensors, one
// WeightMatrix per expert), plus, in Qwen3.5 MoE, a shared expert behind a sigmoid gate.
struct MoeWeights {
  WeightMatrix router;                   // [n_experts, dim]
  std::vector<float> router_bias;        // sigmoid routers: e_score_correction_bias [n_experts]
  std::vector<float> router_logit_bias;  // moe_bias: added to the router's logits [n_experts]
  std::vector<WeightMatrix> gate, up;    // per expert [expert_hidden_dim, dim]
  std::vector<WeightMatrix> down;        // per expert [dim, expert_hidden_dim]
  // moe_bias: every expert's biases, [n_experts][expert_hidden_dim] and [n_experts][dim].
  std::vector<float> b_gate, b_up, b_down;
  MlpWeights shared;         // [shared_expert_hidden_dim, dim] ...; empty if none
  WeightMatrix shared_gate;  // [1, dim]
};

struct LayerWeights {
  LayerKind kind = LayerKind::FullAttention;
  FfnKind ffn = FfnKind::Dense;
  std::vector<float> attn_norm, mlp_norm;
  // Sandwich norms (Gemma): of the attention's and the MLP's outputs, before the residual add.
  std::vector<float> post_attn_norm, post_mlp_norm;
  AttentionWeights attn;
  DeltaNetWeights delta;
  MlpWeights mlp;
  MoeWeights moe;
};

// The Qwen3.5 / 3.6 multi-token-prediction head (runtime/mtp_draft.h): fc over [normed embedding |
// normed hidden state], one full-attention decoder layer, a final norm; it shares the model's
// embedding and output head.
struct MtpWeights {
  WeightMatrix fc;  // [dim, 2 dim]
  std::vector<float> norm_embedding, norm_hidden, final_norm;
  LayerWeights layer;
};

struct ModelWeights {
  WeightMatrix embed;    // [vocab, dim]
  WeightMatrix lm_head;  // [vocab, dim]; the embedding itself when tied
  std::vector<float> final_norm;
  std::vector<LayerWeights> layers;
  MtpWeights mtp;    // empty unless config.mtp_layers > 0
  size_t bytes = 0;  // matrix bytes (a tied head once), for GB/s figures
  // Matrices a loader had to lay out anew (experts stored transposed or interleaved: gpt-oss's
  // HF checkpoints); the views above point into these.
  std::shared_ptr<std::vector<std::vector<uint8_t>>> made_at_load;
};

// Loads and checks every tensor of the family's table (tensor_table.h) against the config: name,
// shape, dtype. `prefix` is the name prefix of the language model ("model." or
// "model.language_model."). Tensors the table does not list are refused, except the rotary
// inv_freq buffers, the multi-token-prediction head (mtp.*) and, under a nested prefix, the rest
// of a multimodal checkpoint (its vision tower), which `skipped` then counts.
ModelWeights load_hf_weights(const TensorStore& store, const ModelConfig& config,
                             const std::string& prefix, size_t* skipped = nullptr);

// Packs every quantised matrix of w (experts included) into the matmul kernel's panels in place
// (pack_weight_panels in ops/matmul.h; the other types are left as they are). The caller vouches
// that those matrices' bytes are the model's own and writable: read into memory or made at load,
// never a mapped file. A tied embedding is packed once for both its uses (lookups read panels via
// dequantize_row).
void pack_weight_panels(const ModelConfig& c, ModelWeights& w);

}  // namespace fak
