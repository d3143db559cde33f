// Gemma 3 (HF "gemma3_text", and the text part of "gemma3" checkpoints; llama.cpp "gemma3"):
// 5 local : 1 global layers, the local ones attending to a sliding window with a RoPE base of their
// own (10k) and the global ones to everything (1M, linearly scaled on the larger checkpoints);
// q/k norms; four (1 + w) RMSNorms per layer (the attention's and the MLP's outputs are normed
// before they join the residual stream); GeGLU with the tanh GELU; embeddings times
// sqrt(hidden_size); attention scaled by query_pre_attn_scalar^-1/2; tied embeddings.
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "models/blocks/blocks.h"
#include "models/config_fields.h"
#include "models/family.h"

namespace fak {

namespace {

// What every Gemma 3 config shares, whichever file it came from.
void gemma3_common(ModelConfig& c) {
  c.qk_norm = true;
  c.norm_plus_one = true;
  c.sandwich_norms = true;
  c.mlp_act = Activation::GeluTanh;
  c.embed_scale = float(std::sqrt(double(c.dim)));
}

class Gemma3Family final : public Family {
 public:
  std::string_view name() const override { return "gemma3_text"; }
  std::vector<std::string_view> hf_model_types() const override { return {"gemma3_text"}; }
  std::string_view gguf_arch() const override { return "gemma3"; }

  // transformers' Gemma3TextConfig: the published 4B/12B/27B checkpoints' text_config gives only
  // what differs from these (the 4B leaves out its heads, head_dim and vocabulary).
  nlohmann::json hf_defaults() const override {
    return {{"vocab_size", 262208},
            {"hidden_size", 2304},
            {"intermediate_size", 9216},
            {"num_hidden_layers", 26},
            {"num_attention_heads", 8},
            {"num_key_value_heads", 4},
            {"head_dim", 256},
            {"hidden_activation", "gelu_pytorch_tanh"},
            {"max_position_embeddings", 131072},
            {"rms_norm_eps", 1e-6},
            {"bos_token_id", 2},
            {"eos_token_id", 1},
            {"tie_word_embeddings", true},
            {"rope_theta", 1000000.0},
            {"query_pre_attn_scalar", 256},
            {"sliding_window", 4096},
            {"rope_local_base_freq", 10000.0},
            {"sliding_window_pattern", 6}};
  }

  void read_hf(const nlohmann::json& j, ModelConfig& c, const std::string& label) const override {
    gemma3_common(c);
    const std::string act = j.contains("hidden_activation") && j["hidden_activation"].is_string()
                                ? j["hidden_activation"].get<std::string>()
                                : "gelu_pytorch_tanh";
    if (act != "gelu_pytorch_tanh")
      fail(label + ": hidden_activation '" + act + "' is not supported (gelu_pytorch_tanh)");
    for (const char* key : {"final_logit_softcapping", "attn_logit_softcapping"})
      if (j.contains(key) && !j[key].is_null())
        fail(label + ": " + key + " is not supported (Gemma 3 has none; Gemma 2 does)");
    if (json_bool_or(j, "attention_bias", false))
      fail(label + ": attention_bias is not supported for gemma3_text");
    c.attn_scale = float(
        1.0 / std::sqrt(json_number_or(j, "query_pre_attn_scalar", double(c.head_dim), label)));
    require_number(std::isfinite(c.attn_scale) && c.attn_scale > 0, label, "query_pre_attn_scalar",
                   "finite and > 0", c.attn_scale);
    c.rope_local_theta = json_number_or(j, "rope_local_base_freq", 10000.0, label);
    // transformers 5 writes both tables under rope_parameters, by layer type.
    if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
      const nlohmann::json& rp = j["rope_parameters"];
      if (rp.contains("sliding_attention") && rp["sliding_attention"].is_object())
        c.rope_local_theta =
            json_number_or(rp["sliding_attention"], "rope_theta", c.rope_local_theta, label);
      if (rp.contains("full_attention") && rp["full_attention"].is_object())
        read_global_rope(rp["full_attention"], c, label);
    }
    require_number(std::isfinite(c.rope_local_theta) && c.rope_local_theta > 0, label,
                   "rope_local_base_freq", "finite and > 0", c.rope_local_theta);
    // Older configs give only the pattern: every pattern-th layer is global.
    if (!c.has_windows()) {
      const int window = json_int_or(j, "sliding_window", 0, kMaxSeqLen, label);
      const int pattern = json_int_or(j, "sliding_window_pattern", 6, kMaxLayers, label);
      if (window > 0)
        for (int l = 0; l < c.n_layers; ++l)
          if ((l + 1) % pattern != 0) c.layers[size_t(l)].window = window;
    }
  }

  void read_gguf(const GgufFile& f, const std::string& p, ModelConfig& c) const override {
    gemma3_common(c);
    // The local base (rope.freq_base_swa; older files have none: 10k). No attention scale is kept:
    // 1 / sqrt(head size), except on the 27B (62 layers), whose query_pre_attn_scalar is hidden /
    // heads (llama.cpp's own rule).
    c.rope_local_theta = f.get_f32_or(p + "rope.freq_base_swa", 10000.0f);
    if (!(std::isfinite(c.rope_local_theta) && c.rope_local_theta > 0))
      fail(f.name() + ": " + p + "rope.freq_base_swa must be finite and > 0, got " +
           number_text(c.rope_local_theta));
    const double scalar = c.n_layers == 62 ? double(c.dim) / c.n_heads : double(c.head_dim);
    c.attn_scale = float(1.0 / std::sqrt(scalar));
    const int window = gguf_positive_or(f, p + "attention.sliding_window", 0, kMaxSeqLen);
    const int pattern = gguf_positive_or(f, p + "attention.sliding_window_pattern", 6, kMaxLayers);
    if (window > 0)
      for (int l = 0; l < c.n_layers; ++l)
        if ((l + 1) % pattern != 0) c.layers[size_t(l)].window = window;
  }

  void write_gguf(GgufWriter& w, const std::string& p, const ModelConfig& c) const override {
    w.set_u32(p + "attention.key_length", uint32_t(c.head_dim));
    w.set_u32(p + "attention.value_length", uint32_t(c.head_dim));
    if (const int window = c.max_window(); window > 0)
      w.set_u32(p + "attention.sliding_window", uint32_t(window));
    if (c.rope_local_theta > 0) w.set_f32(p + "rope.freq_base_swa", float(c.rope_local_theta));
  }

  void tensors(const ModelConfig& c, ModelWeights& w, int layer,
               std::vector<TensorDef>& out) const override {
    if (layer < 0) return model_io_tensors(c, w, out);
    decoder_layer_tensors(c, w.layers[size_t(layer)], layer, {}, out);
  }

 private:
  // The global layers' table from rope_parameters.full_attention (transformers 5).
  static void read_global_rope(const nlohmann::json& g, ModelConfig& c, const std::string& label) {
    c.rope_theta = json_number_or(g, "rope_theta", c.rope_theta, label);
    const std::string type = g.contains("rope_type") && g["rope_type"].is_string()
                                 ? g["rope_type"].get<std::string>()
                                 : "default";
    if (type == "linear") {
      c.rope_scaling = RopeScaling::Linear;
      c.rope_factor = json_number_or(g, "factor", 1.0, label);
      require_number(std::isfinite(c.rope_factor) && c.rope_factor > 0, label, "factor",
                     "finite and > 0", c.rope_factor);
    } else if (type != "default") {
      fail(label + ": rope_parameters.full_attention.rope_type '" + type +
           "' is not supported for gemma3_text (default, linear)");
    }
  }
};

}  // namespace

const Family& gemma3_family() {
  static const Gemma3Family f;
  return f;
}

}  // namespace fak
