// Mistral (HF model_type "mistral": Mistral 7B, Mistral Nemo, Mistral Small 3.x, Devstral): Llama's
// layers without biases, and a sliding window on every layer where the config gives one (Mistral
// 7B v0.1: 4096; the later models write null). No op of its own: the family is this file and its
// line in registry.cpp.
//
// llama.cpp's converter writes these checkpoints as arch "llama" (q/k rows reordered for its
// interleaved RoPE, as for Llama), so a Mistral GGUF loads as the llama family. Its llama arch has
// no window: a windowed checkpoint is refused by fak convert, whose GGUF would run another model.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf_writer.h"
#include "models/blocks/blocks.h"
#include "models/config_fields.h"
#include "models/family.h"

namespace fak {

namespace {

class MistralFamily final : public Family {
 public:
  std::string_view name() const override { return "mistral"; }
  std::vector<std::string_view> hf_model_types() const override { return {"mistral"}; }
  std::string_view gguf_arch() const override { return "llama"; }
  // transformers' MistralConfig: a config.json that leaves sliding_window out gets 4096; one that
  // writes null has none (not hf_defaults(), under which a null keeps the default).
  void read_hf(const nlohmann::json& j, ModelConfig& c, const std::string& label) const override {
    const int window = j.contains("sliding_window")
                           ? json_int_or(j, "sliding_window", 0, kMaxSeqLen, label)
                           : 4096;
    if (window > 0)
      for (LayerSlot& s : c.layers) s.window = window;
  }
  // Never reached: general.architecture "llama" names the llama family.
  void read_gguf(const GgufFile&, const std::string&, ModelConfig&) const override {}
  void write_gguf(GgufWriter& w, const std::string& p, const ModelConfig& c) const override {
    if (c.has_windows())
      fail("GGUF export: this Mistral checkpoint attends over a sliding window of " +
           std::to_string(c.max_window()) +
           " positions, which llama.cpp's llama architecture (what its converter writes Mistral "
           "as) has no key for: the file would run another model");
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

const Family& mistral_family() {
  static const MistralFamily f;
  return f;
}

}  // namespace fak
