// Qwen3 dense (HF "qwen3", llama.cpp "qwen3"): an RMSNorm over each q and k head, an explicit
// head_dim, optional attention biases.
#include <nlohmann/json.hpp>

#include "io/gguf_writer.h"
#include "models/blocks/blocks.h"
#include "models/config_fields.h"
#include "models/family.h"

namespace fak {

namespace {

class Qwen3Family final : public Family {
 public:
  std::string_view name() const override { return "qwen3"; }
  std::vector<std::string_view> hf_model_types() const override { return {"qwen3"}; }
  std::string_view gguf_arch() const override { return "qwen3"; }

  void read_hf(const nlohmann::json& j, ModelConfig& c, const std::string&) const override {
    c.qk_norm = true;
    c.qkv_bias = json_bool_or(j, "attention_bias", false);
  }
  // qwen3 always has q/k norms: the loader then names whichever is missing.
  void read_gguf(const GgufFile&, const std::string&, ModelConfig& c) const override {
    c.qk_norm = true;
  }
  void write_gguf(GgufWriter& w, const std::string& p, const ModelConfig& c) const override {
    w.set_u32(p + "attention.key_length", uint32_t(c.head_dim));
    w.set_u32(p + "attention.value_length", uint32_t(c.head_dim));
  }
  void tensors(const ModelConfig& c, ModelWeights& w, int layer,
               std::vector<TensorDef>& out) const override {
    if (layer < 0) return model_io_tensors(c, w, out);
    decoder_layer_tensors(c, w.layers[size_t(layer)], layer, {}, out);
  }
};

}  // namespace

const Family& qwen3_family() {
  static const Qwen3Family f;
  return f;
}

}  // namespace fak
