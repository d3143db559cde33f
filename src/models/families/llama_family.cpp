// Llama (HF model_type "llama", llama.cpp arch "llama"): attention with optional biases
// (attention_bias also adds o_proj's), an optional MLP bias, and q/k rows that llama.cpp's
// converter reorders for its interleaved RoPE (undone at load).
#include <nlohmann/json.hpp>

#include "io/gguf_writer.h"
#include "models/blocks/blocks.h"
#include "models/config_fields.h"
#include "models/family.h"

namespace fak {

namespace {

class LlamaFamily final : public Family {
 public:
  std::string_view name() const override { return "llama"; }
  std::vector<std::string_view> hf_model_types() const override { return {"llama"}; }
  std::string_view gguf_arch() const override { return "llama"; }

  void read_hf(const nlohmann::json& j, ModelConfig& c, const std::string&) const override {
    c.qkv_bias = json_bool_or(j, "attention_bias", false);
    c.attn_output_bias = c.qkv_bias;
    c.mlp_bias = json_bool_or(j, "mlp_bias", false);
  }
  void read_gguf(const GgufFile&, const std::string&, ModelConfig&) const override {}
  void write_gguf(GgufWriter& w, const std::string& p, const ModelConfig& c) const override {
    w.set_u32(p + "vocab_size", uint32_t(c.vocab));
    w.set_u32(p + "rope.dimension_count", uint32_t(c.rotary_dim));
  }
  void tensors(const ModelConfig& c, ModelWeights& w, int layer,
               std::vector<TensorDef>& out) const override {
    if (layer < 0) return model_io_tensors(c, w, out);
    decoder_layer_tensors(c, w.layers[size_t(layer)], layer, {"ffn_norm", true}, out);
  }
};

}  // namespace

const Family& llama_family() {
  static const LlamaFamily f;
  return f;
}

}  // namespace fak
