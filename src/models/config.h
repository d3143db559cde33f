// Model architecture as data: every family is normalised into one ModelConfig at load time: the
// model-wide sizes and settings, and per layer what varies (LayerSlot: its mixer, its FFN, its
// window). layer_spec() puts the two together into the LayerSpec (ops/specs.h) the forward pass
// and the backends read, so nothing above this file branches on architecture names.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "memory/recurrent_state.h"
#include "ops/specs.h"

namespace fak {

// Limits on the sizes a model file may declare, checked (config.json and GGUF alike) before
// anything sized by them is allocated: a tiny hostile file claiming 2^30 layers must be refused,
// not make fak allocate gigabytes first. Far above every real checkpoint (Llama-3.1-405B: 126
// layers, hidden 16384, MLP 53248; Gemma: 262144-token vocab; Llama-4: 10M-token context).
inline constexpr int kMaxLayers = 4096;
inline constexpr int kMaxWidth = 1 << 20;  // dim, hidden_dim, head_dim, heads, vocab, q/kv dims
inline constexpr int kMaxSeqLen = 1 << 24;

// Experts per MoE layer and experts a token may use: far above Qwen3.5-397B's 512 / 10.
inline constexpr int kMaxExperts = 4096;

class Family;
enum class RopeScaling { None, Linear, Llama3, Yarn };

// What varies from layer to layer in the families fak runs, as the families read it from a
// config.json or a GGUF: the token mixer (Qwen3.5's DeltaNet / attention pattern), the FFN (GLM's
// leading dense layers), the sliding window (Gemma 3, gpt-oss).
struct LayerSlot {
  LayerKind mixer = LayerKind::FullAttention;
  FfnKind ffn = FfnKind::Dense;
  int window = 0;  // > 0: the layer attends to the last `window` positions only
  bool operator==(const LayerSlot&) const = default;
};

struct ModelConfig {
  const Family* family = nullptr;  // models/family.h: llama, qwen2, qwen3, qwen35, qwen3_moe, ...
  std::string model_type;  // as the file names it: "llama", "qwen2", "qwen3", "qwen3_5_text"
  int dim = 0;             // hidden_size
  int hidden_dim = 0;      // intermediate_size (MLP)
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;     // explicit in the config, or dim / n_heads
  int vocab = 0;        // rows of the embedding (may be padded beyond the tokenizer)
  int max_seq_len = 0;  // max_position_embeddings / context_length: the trained context
  float rms_eps = 1e-6f;
  double rope_theta = 10000.0;
  int rotary_dim = 0;  // dims of each head that RoPE rotates (partial rotary: < head_dim)
  RopeScaling rope_scaling = RopeScaling::None;
  double rope_factor = 1.0;  // linear / llama3 / yarn
  double rope_low_freq_factor = 1.0, rope_high_freq_factor = 4.0;
  int rope_original_max_pos = 8192;  // llama3 / yarn: the context the model was trained at
  // YaRN (models/rope.h): the correction range is found from beta_fast / beta_slow rotations and,
  // unless truncate is false (gpt-oss), rounded outward to whole dimensions.
  double rope_yarn_beta_fast = 32.0, rope_yarn_beta_slow = 1.0;
  bool rope_yarn_truncate = true;
  // Multiplies every cos and sin (YaRN's mscale): resolved at parse time from attention_factor,
  // mscale / mscale_all_dim or 0.1 ln(factor) + 1, as HF does; 1 for the other rope types.
  double rope_attention_factor = 1.0;

  bool tie_embeddings = false;
  bool qkv_bias = false;          // Qwen2
  bool attn_output_bias = false;  // llama attention_bias also adds o_proj bias
  bool mlp_bias = false;
  bool qk_norm = false;           // Qwen3 / Qwen3.5: RMSNorm over each q and k head
  bool attn_output_gate = false;  // Qwen3.5 gated attention
  bool norm_plus_one = false;     // Qwen3.5: RMSNorm scale stored zero-centred (1 + w)

  // Gemma 3: GeGLU, four norms per layer (the attention's and the MLP's outputs are normed too
  // before they join the residual stream), embeddings times sqrt(hidden_size), an attention scale
  // of query_pre_attn_scalar^-1/2, and local layers with a sliding window and a RoPE of their own.
  Activation mlp_act = Activation::Silu;
  bool sandwich_norms = false;
  float embed_scale = 1.0f;
  float attn_scale = 0.0f;        // 0: 1 / sqrt(head_dim)
  double rope_local_theta = 0.0;  // > 0: windowed layers rotate with this base, unscaled

  // gpt-oss: a learned logit per query head that joins every softmax of its attention as one more
  // key with no value ("attention sinks"), so a head may attend to nothing.
  bool attn_sinks = false;

  std::vector<LayerSlot> layers;  // one per layer
  // Gated DeltaNet (Qwen3.5) layers.
  int linear_conv_kernel = 0;
  int linear_key_head_dim = 0, linear_value_head_dim = 0;
  int linear_num_key_heads = 0, linear_num_value_heads = 0;

  // Mixture-of-experts layers (FfnKind::Moe): a router picks n_experts_used of n_experts SwiGLU
  // experts of width expert_hidden_dim per token; Qwen3.5 MoE adds an always-on shared expert of
  // width shared_expert_hidden_dim behind a sigmoid gate (0: none).
  int n_experts = 0, n_experts_used = 0, expert_hidden_dim = 0, shared_expert_hidden_dim = 0;
  bool norm_topk_prob = true;  // renormalise the chosen experts' weights to sum to 1
  // Sigmoid routers (GLM-4.5): experts are chosen by sigmoid + e_score_correction_bias, first the
  // n_groups_used best of n_expert_groups groups (a group's score: the sum of its two best), then
  // the top experts within them; the chosen weights (without the bias) are renormalised
  // (norm_topk_prob) and multiplied by routed_scaling.
  RouterKind router = RouterKind::Softmax;
  int n_expert_groups = 1, n_groups_used = 1;
  float routed_scaling = 1.0f;
  bool shared_expert_gated = true;  // Qwen3.5's sigmoid gate on the shared expert; GLM's has none
  // gpt-oss: the router's logits and every expert's gate, up and down projections add a bias; the
  // experts' activation (SwiGLU, or the clamped one with its alpha and limit).
  bool moe_bias = false;
  Activation expert_act = Activation::Silu;
  float swiglu_alpha = 1.702f, swiglu_limit = 7.0f;

  // The multi-token-prediction head of the Qwen3.5 / 3.6 hybrids (runtime/mtp_draft.h): HF
  // mtp_num_hidden_layers, GGUF <arch>.nextn_predict_layers; 0 when the file has no MTP weights.
  // It drafts tokens for speculative decoding and is never part of the model's own forward.
  int mtp_layers = 0;
  // Multi-token-prediction blocks fak does not run, stored as decoder layers past the last one
  // (GLM-4.5's num_nextn_predict_layers: model.layers.<n_layers>.*); their tensors are left unread.
  int unread_nextn_layers = 0;

  std::optional<int32_t> bos_id;
  std::vector<int32_t> eos_ids;

  int kv_dim() const { return n_kv_heads * head_dim; }
  // Layer l's sliding window (0: it attends to every earlier position); -1 (the MTP layer): 0.
  int window(int layer) const {
    return layer >= 0 && size_t(layer) < layers.size() ? layers[size_t(layer)].window : 0;
  }
  bool has_windows() const {
    return std::any_of(layers.begin(), layers.end(),
                       [](const LayerSlot& s) { return s.window > 0; });
  }
  int max_window() const;  // the widest layer's window (0: none)
  // Layers whose mixer / FFN is `kind`.
  int count_mixers(LayerKind kind) const;
  int count_ffns(FfnKind kind) const;
  // The whole of what layer `layer` computes (-1: the MTP head's one full-attention layer).
  LayerSpec layer_spec(int layer) const;
  // Which RoPE table layer l rotates with: 0 (the model's), or 1 (the local one of windowed
  // layers).
  int rope_table(int layer) const { return rope_local_theta > 0 && window(layer) > 0 ? 1 : 0; }
  int n_rope_tables() const { return rope_local_theta > 0 ? 2 : 1; }
  int q_dim() const { return n_heads * head_dim; }
  // Gated DeltaNet layers (Qwen3.5 hybrids): a recurrent state per sequence beside the KV cache.
  bool is_hybrid() const { return linear_num_value_heads > 0; }
  bool is_moe() const { return n_experts > 0; }
  std::string family_name() const;  // "qwen3_moe", or "?" before a family is set
  // Sizes of a session's Gated DeltaNet state; no linear layers (an empty state) for dense models.
  RecurrentShape recurrent_shape() const;
  // The longest context a sequence may reach: the trained one, or with YaRN the trained length
  // times its factor (what the scaling was made for: Qwen2.5 / Qwen3 documents 32k x 4 = 128k
  // with max_position_embeddings left at 32k, and vLLM reads it the same way).
  int context_limit() const {
    if (rope_scaling != RopeScaling::Yarn) return max_seq_len;
    const double stretched = double(rope_original_max_pos) * rope_factor;
    return stretched > double(max_seq_len) ? int(std::min(stretched, 16777216.0)) : max_seq_len;
  }
};

// Parses a Hugging Face config.json (already read into JSON). `label` names the file in errors.
// Throws fak::Error for unknown model types, missing or inconsistent fields, sizes beyond the
// limits above, a non-finite or out-of-range rms_norm_eps / rope_theta / partial_rotary_factor,
// and bos/eos token ids outside the vocabulary; each error names the field and the value.
ModelConfig parse_hf_config(const nlohmann::json& j, const std::string& label);
ModelConfig load_hf_config(const std::filesystem::path& config_json);

// Limits on products of sizes that the config.json and GGUF paths share (q_dim, the linear-
// attention dims, the recurrent state each session allocates from the config alone); `label`
// names the file. Throws fak::Error naming the product and its value.
void check_derived_sizes(const ModelConfig& c, const std::string& label);
// The shortest decimal text that reads back as v ("1e-06", "nan", "-inf"): values in errors.
std::string number_text(double v);

}  // namespace fak
