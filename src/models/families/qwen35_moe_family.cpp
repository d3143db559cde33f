// Qwen3.5 / 3.6 MoE (Qwen3.5-35B-A3B, Qwen3.6-35B-A3B; HF "qwen3_5_moe_text", multimodal
// "qwen3_5_moe"; llama.cpp "qwen35moe"): the Qwen3.5 hybrid's Gated DeltaNet and gated attention
// with a sparse MoE block in every layer: a softmax router whose chosen weights are always
// renormalised, experts stored fused by transformers (gate_up_proj [E, 2I, H], down_proj
// [E, H, I]), and a shared expert behind a sigmoid gate.
#include "models/blocks/blocks.h"
#include "models/family.h"

namespace fak {

namespace {

class Qwen35MoeFamily final : public Family {
 public:
  std::string_view name() const override { return "qwen3_5_moe_text"; }
  std::vector<std::string_view> hf_model_types() const override {
    return {"qwen3_5_moe_text", "qwen3_5_moe"};
  }
  std::string_view gguf_arch() const override { return "qwen35moe"; }

  void read_hf(const nlohmann::json& j, ModelConfig& c, const std::string& label) const override {
    read_deltanet_hf(j, c, label);
    read_moe_hf(j, c, label);
    c.norm_topk_prob = true;  // Qwen3_5MoeTopKRouter always renormalises (the key was dropped)
  }
  void read_gguf(const GgufFile& f, const std::string& p, ModelConfig& c) const override {
    read_deltanet_gguf(f, p, c);
    read_moe_gguf(f, p, c);
  }
  void write_gguf(GgufWriter& w, const std::string& p, const ModelConfig& c) const override {
    write_deltanet_gguf(w, p, c);
    write_moe_gguf(w, p, c);
  }
  void tensors(const ModelConfig& c, ModelWeights& w, int layer,
               std::vector<TensorDef>& out) const override {
    const LayerStyle style{"post_attention_norm", false, ExpertStorage::Fused};
    if (layer < 0) return model_io_tensors(c, w, out);
    if (layer == c.n_layers) return mtp_tensors(c, w, style, out);
    decoder_layer_tensors(c, w.layers[size_t(layer)], layer, style, out);
  }
};

}  // namespace

const Family& qwen35_moe_family() {
  static const Qwen35MoeFamily f;
  return f;
}

}  // namespace fak
