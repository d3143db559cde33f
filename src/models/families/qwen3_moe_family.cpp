// Qwen3 MoE (Qwen3-30B-A3B, Qwen3-Coder-30B-A3B; HF "qwen3_moe", llama.cpp "qwen3moe"): Qwen3's
// attention with a sparse MoE block (a softmax router over num_experts, the top
// num_experts_per_tok experts per token) in every decoder_sparse_step-th layer not listed in
// mlp_only_layers, a dense MLP in the others. HF stores one tensor per expert.
//
// note: llama.cpp's qwen3moe always renormalises the chosen experts' weights. A checkpoint with
// norm_topk_prob: false converts to a GGUF that says so in qwen3moe.expert_weights_norm, which
// fak honours and llama.cpp ignores (it then computes another model); `fak convert` warns.
#include <nlohmann/json.hpp>

#include "io/gguf_writer.h"
#include "models/blocks/blocks.h"
#include "models/config_fields.h"
#include "models/family.h"

namespace fak {

namespace {

class Qwen3MoeFamily final : public Family {
 public:
  std::string_view name() const override { return "qwen3_moe"; }
  std::vector<std::string_view> hf_model_types() const override { return {"qwen3_moe"}; }
  std::string_view gguf_arch() const override { return "qwen3moe"; }

  void read_hf(const nlohmann::json& j, ModelConfig& c, const std::string& label) const override {
    c.qk_norm = true;
    c.qkv_bias = json_bool_or(j, "attention_bias", false);
    read_moe_hf(j, c, label);
    // Qwen3MoeConfig's default (the released checkpoints all set it true).
    c.norm_topk_prob = json_bool_or(j, "norm_topk_prob", false);
  }
  void read_gguf(const GgufFile& f, const std::string& p, ModelConfig& c) const override {
    c.qk_norm = true;
    read_moe_gguf(f, p, c);
  }
  void write_gguf(GgufWriter& w, const std::string& p, const ModelConfig& c) const override {
    w.set_u32(p + "attention.key_length", uint32_t(c.head_dim));
    w.set_u32(p + "attention.value_length", uint32_t(c.head_dim));
    write_moe_gguf(w, p, c);
  }
  void tensors(const ModelConfig& c, ModelWeights& w, int layer,
               std::vector<TensorDef>& out) const override {
    if (layer < 0) return model_io_tensors(c, w, out);
    decoder_layer_tensors(c, w.layers[size_t(layer)], layer, {}, out);
  }
};

}  // namespace

const Family& qwen3_moe_family() {
  static const Qwen3MoeFamily f;
  return f;
}

}  // namespace fak
