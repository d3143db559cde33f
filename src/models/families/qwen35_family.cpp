// The Qwen3.5 / 3.6 hybrids (HF "qwen3_5_text", multimodal "qwen3_5"; llama.cpp "qwen35"): Gated
// DeltaNet layers with gated full attention every full_attention_interval-th layer, partial
// rotary, RMSNorm scales stored zero-centred (1 + w), and a dense MLP.
#include "models/blocks/blocks.h"
#include "models/family.h"

namespace fak {

namespace {

class Qwen35Family final : public Family {
 public:
  std::string_view name() const override { return "qwen3_5_text"; }
  std::vector<std::string_view> hf_model_types() const override {
    return {"qwen3_5_text", "qwen3_5"};
  }
  std::string_view gguf_arch() const override { return "qwen35"; }

  void read_hf(const nlohmann::json& j, ModelConfig& c, const std::string& label) const override {
    read_deltanet_hf(j, c, label);
  }
  void read_gguf(const GgufFile& f, const std::string& p, ModelConfig& c) const override {
    read_deltanet_gguf(f, p, c);
  }
  void write_gguf(GgufWriter& w, const std::string& p, const ModelConfig& c) const override {
    write_deltanet_gguf(w, p, c);
  }
  void tensors(const ModelConfig& c, ModelWeights& w, int layer,
               std::vector<TensorDef>& out) const override {
    const LayerStyle style{"post_attention_norm"};
    if (layer < 0) return model_io_tensors(c, w, out);
    if (layer == c.n_layers) return mtp_tensors(c, w, style, out);
    decoder_layer_tensors(c, w.layers[size_t(layer)], layer, style, out);
  }
};

}  // namespace

const Family& qwen35_family() {
  static const Qwen35Family f;
  return f;
}

}  // namespace fak
