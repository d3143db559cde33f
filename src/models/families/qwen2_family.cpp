// Qwen2 / Qwen2.5 (HF "qwen2", llama.cpp "qwen2"): llama's block with q/k/v biases always on and
// HF's rotate-half RoPE layout kept in GGUF.
#include "models/blocks/blocks.h"
#include "models/family.h"

namespace fak {

namespace {

class Qwen2Family final : public Family {
 public:
  std::string_view name() const override { return "qwen2"; }
  std::vector<std::string_view> hf_model_types() const override { return {"qwen2"}; }
  std::string_view gguf_arch() const override { return "qwen2"; }

  void read_hf(const nlohmann::json&, ModelConfig& c, const std::string&) const override {
    c.qkv_bias = true;
  }
  void read_gguf(const GgufFile&, const std::string&, ModelConfig&) const override {}
  void write_gguf(GgufWriter&, const std::string&, const ModelConfig&) const override {}
  void tensors(const ModelConfig& c, ModelWeights& w, int layer,
               std::vector<TensorDef>& out) const override {
    if (layer < 0) return model_io_tensors(c, w, out);
    decoder_layer_tensors(c, w.layers[size_t(layer)], layer, {}, out);
  }
};

}  // namespace

const Family& qwen2_family() {
  static const Qwen2Family f;
  return f;
}

}  // namespace fak
