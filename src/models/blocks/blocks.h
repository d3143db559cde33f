// The building blocks families are made of, as tensor-table entries (tensor_table.h): the model's
// input and output, attention, the dense SwiGLU MLP, Gated DeltaNet and the sparse MoE block.
// Their config parts (DeltaNet and MoE sizes) are read and written here too, so two families that
// share a block share its parsing.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "models/blocks/table_entries.h"

namespace fak {

class GgufFile;
class GgufWriter;

// token_embd, output_norm and (untied) output.
void model_io_tensors(const ModelConfig& c, ModelWeights& w, std::vector<TensorDef>& out);

// input_layernorm (attn_norm) and post_attention_layernorm, whose GGUF name is the family's
// (`ffn_norm` in llama.cpp's dense archs, `post_attention_norm` in the Qwen3.5 ones).
void layer_norm_tensors(const ModelConfig& c, LayerWeights& L, const LayerNames& n,
                        const char* gguf_post_norm, std::vector<TensorDef>& out);

// Attention: q (with the output gate's rows when attn_output_gate), k, v, o, their biases
// (qkv_bias, attn_output_bias) and q/k norms (qk_norm). rope_pairs: llama.cpp's converter stores
// q/k rows for interleaved RoPE (its llama arch).
void attention_tensors(const ModelConfig& c, AttentionWeights& a, const LayerNames& n,
                       bool rope_pairs, std::vector<TensorDef>& out);

// The dense SwiGLU MLP (gate, up, down; biases with mlp_bias).
void mlp_tensors(const ModelConfig& c, MlpWeights& m, const LayerNames& n,
                 std::vector<TensorDef>& out);

// Gated DeltaNet (Qwen3.5 linear attention), in llama.cpp's qwen35 conventions (qwen35_gguf.h).
void deltanet_tensors(const ModelConfig& c, DeltaNetWeights& d, const LayerNames& n,
                      std::vector<TensorDef>& out);
void read_deltanet_hf(const nlohmann::json& j, ModelConfig& c, const std::string& label);
void read_deltanet_gguf(const GgufFile& f, const std::string& p, ModelConfig& c);
void write_deltanet_gguf(GgufWriter& w, const std::string& p, const ModelConfig& c);

// How a checkpoint stores its experts: one tensor per expert and projection (Qwen3 MoE), or
// gate and up fused into one [n_experts, 2 x expert_hidden_dim, dim] tensor beside a stacked down
// (Qwen3.5 MoE, transformers >= 5).
enum class ExpertStorage { PerExpert, Fused };

// The sparse MoE block: router, experts, and the shared expert with its gate when the config has
// one (shared_expert_hidden_dim > 0).
void moe_tensors(const ModelConfig& c, MoeWeights& m, const LayerNames& n, ExpertStorage storage,
                 std::vector<TensorDef>& out);
// num_experts, num_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size,
// norm_topk_prob, and which layers are sparse (decoder_sparse_step, mlp_only_layers).
void read_moe_hf(const nlohmann::json& j, ModelConfig& c, const std::string& label);
void read_moe_gguf(const GgufFile& f, const std::string& p, ModelConfig& c);
void write_moe_gguf(GgufWriter& w, const std::string& p, const ModelConfig& c);

// The conventions a family's files follow, for decoder_layer_tensors.
struct LayerStyle {
  const char* gguf_post_norm = "ffn_norm";  // llama.cpp's name of post_attention_layernorm
  bool rope_pairs = false;                  // attention_tensors' rope_pairs
  ExpertStorage experts = ExpertStorage::PerExpert;
};

// One decoder layer: its norms, its token mixer (attention or Gated DeltaNet, by the layer's
// kind) and its feed-forward block (dense MLP or MoE, by the layer's ffn kind).
void decoder_layer_tensors(const ModelConfig& c, LayerWeights& L, int layer,
                           const LayerStyle& style, std::vector<TensorDef>& out);

// The multi-token-prediction head of the Qwen3.5 hybrids (table part n_layers; mtp_block.cpp):
// its fc and norms, and a full-attention decoder layer in the family's style.
void mtp_tensors(const ModelConfig& c, ModelWeights& w, const LayerStyle& style,
                 std::vector<TensorDef>& out);

}  // namespace fak
