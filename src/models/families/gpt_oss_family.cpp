// gpt-oss (HF "gpt_oss", llama.cpp "gpt-oss"; gpt-oss-20b: 24 layers, 32 experts top-4; 120b:
// 36 layers, 128 experts): attention with q/k/v/o biases and a learned sink logit per head,
// alternating sliding-window (128) and full layers (the first one sliding), YaRN; every layer a
// MoE whose router adds a bias and takes a softmax over its top k logits alone, and whose experts
// have biases and the clamped SwiGLU ((clamp(up) + 1) * g * sigmoid(1.702 g), g = min(gate, 7)).
// transformers holds the experts as x @ W ([E, in, out]) with gate and up interleaved by column
// (gate_up_proj [E, H, 2I]), which the table's layouts undo at load.
#include <algorithm>
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

void gpt_oss_common(ModelConfig& c) {
  c.qkv_bias = true;
  c.attn_output_bias = true;
  c.attn_sinks = true;
  c.router = RouterKind::SoftmaxChosen;
  c.moe_bias = true;
  c.expert_act = Activation::ClampedSwiglu;
  c.swiglu_alpha = 1.702f;  // fixed in transformers and llama.cpp alike
  for (LayerSlot& s : c.layers) s.ffn = FfnKind::Moe;
}

// The experts' table entries in transformers' layout (router.weight / router.bias,
// experts.gate_up_proj [E, H, 2I] interleaved, experts.down_proj [E, I, H], their biases) and
// llama.cpp's names.
void gpt_oss_moe_tensors(const ModelConfig& c, MoeWeights& m, const LayerNames& n,
                         std::vector<TensorDef>& out) {
  const std::string hf = n.hf + "mlp.";
  const int64_t I = c.expert_hidden_dim, E = c.n_experts;
  TensorDef router = matrix_entry(m.router, E, c.dim, hf + "router.weight",
                                  n.gguf + "ffn_gate_inp.weight", "ffn_gate_inp");
  router.keep_float = true;
  out.push_back(std::move(router));
  out.push_back(
      vector_entry(m.router_logit_bias, E, hf + "router.bias", n.gguf + "ffn_gate_inp.bias"));
  const std::string ex = hf + "experts.";
  out.push_back(experts_entry(m.gate, I, c.dim, ex + "gate_up_proj", HfLayout::InterleavedEven,
                              n.gguf + "ffn_gate_exps.weight", "ffn_gate_exps"));
  out.push_back(experts_entry(m.up, I, c.dim, ex + "gate_up_proj", HfLayout::InterleavedOdd,
                              n.gguf + "ffn_up_exps.weight", "ffn_up_exps"));
  out.push_back(experts_entry(m.down, c.dim, I, ex + "down_proj", HfLayout::StackedTransposed,
                              n.gguf + "ffn_down_exps.weight", "ffn_down_exps"));
  auto bias = [&](std::vector<float>& v, int64_t width, const char* hf_name, HfLayout layout,
                  const char* gguf_name) {
    TensorDef d = vector_entry(v, E, ex + hf_name, n.gguf + gguf_name + ".bias");
    d.cols = width;
    d.hf_layout = layout;
    out.push_back(std::move(d));
  };
  bias(m.b_gate, I, "gate_up_proj_bias", HfLayout::InterleavedEven, "ffn_gate_exps");
  bias(m.b_up, I, "gate_up_proj_bias", HfLayout::InterleavedOdd, "ffn_up_exps");
  bias(m.b_down, c.dim, "down_proj_bias", HfLayout::Plain, "ffn_down_exps");
}

class GptOssFamily final : public Family {
 public:
  std::string_view name() const override { return "gpt_oss"; }
  std::vector<std::string_view> hf_model_types() const override { return {"gpt_oss"}; }
  std::string_view gguf_arch() const override { return "gpt-oss"; }

  void read_hf(const nlohmann::json& j, ModelConfig& c, const std::string& label) const override {
    gpt_oss_common(c);
    if (j.contains("attention_bias") && !json_bool_or(j, "attention_bias", true))
      fail(label + ": attention_bias false is not supported for gpt_oss");
    c.n_experts = json_int(j, "num_local_experts", kMaxExperts, label);
    c.n_experts_used = j.contains("num_experts_per_tok")
                           ? json_int(j, "num_experts_per_tok", kMaxExperts, label)
                           : json_int(j, "experts_per_token", kMaxExperts, label);
    c.expert_hidden_dim = json_int(j, "intermediate_size", kMaxWidth, label);
    c.swiglu_limit = float(json_number_or(j, "swiglu_limit", 7.0, label));
    require_number(std::isfinite(c.swiglu_limit) && c.swiglu_limit > 0, label, "swiglu_limit",
                   "finite and > 0", c.swiglu_limit);
    if (c.n_experts_used > c.n_experts)
      fail(label + ": num_experts_per_tok " + std::to_string(c.n_experts_used) +
           " exceeds num_local_experts " + std::to_string(c.n_experts));
    // Older configs give no layer_types: sliding and full alternate, the first sliding.
    if (!c.has_windows()) {
      const int window = json_int_or(j, "sliding_window", 0, kMaxSeqLen, label);
      if (window > 0) alternate_windows(c, window);
    }
  }

  void read_gguf(const GgufFile& f, const std::string& p, ModelConfig& c) const override {
    gpt_oss_common(c);
    c.n_experts = gguf_positive(f, p + "expert_count", kMaxExperts);
    c.n_experts_used = gguf_positive(f, p + "expert_used_count", kMaxExperts);
    c.expert_hidden_dim = gguf_positive(f, p + "expert_feed_forward_length", kMaxWidth);
    if (c.n_experts_used > c.n_experts)
      fail(f.name() + ": " + p + "expert_used_count exceeds " + p + "expert_count");
    // llama.cpp: every second layer windowed, the first one too (a pattern of 2 unless said).
    const int window = gguf_positive_or(f, p + "attention.sliding_window", 0, kMaxSeqLen);
    const int pattern = gguf_positive_or(f, p + "attention.sliding_window_pattern", 2, kMaxLayers);
    if (window > 0)
      for (int l = 0; l < c.n_layers; ++l)
        if (l % pattern < pattern - 1) c.layers[size_t(l)].window = window;
  }

  void write_gguf(GgufWriter& w, const std::string& p, const ModelConfig& c) const override {
    w.set_u32(p + "attention.key_length", uint32_t(c.head_dim));
    w.set_u32(p + "attention.value_length", uint32_t(c.head_dim));
    w.set_u32(p + "expert_count", uint32_t(c.n_experts));
    w.set_u32(p + "expert_used_count", uint32_t(c.n_experts_used));
    w.set_u32(p + "expert_feed_forward_length", uint32_t(c.expert_hidden_dim));
    if (const int window = c.max_window(); window > 0)
      w.set_u32(p + "attention.sliding_window", uint32_t(window));
  }

  void tensors(const ModelConfig& c, ModelWeights& w, int layer,
               std::vector<TensorDef>& out) const override {
    if (layer < 0) return model_io_tensors(c, w, out);
    LayerWeights& L = w.layers[size_t(layer)];
    const LayerNames n(layer);
    layer_norm_tensors(c, L, n, "post_attention_norm", out);
    attention_tensors(c, L.attn, n, false, out);
    gpt_oss_moe_tensors(c, L.moe, n, out);
  }

 private:
  static void alternate_windows(ModelConfig& c, int window) {
    for (int l = 0; l < c.n_layers; l += 2) c.layers[size_t(l)].window = window;
  }
};

}  // namespace

const Family& gpt_oss_family() {
  static const GptOssFamily f;
  return f;
}

}  // namespace fak
