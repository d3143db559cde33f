// GLM-4.5 / 4.6 MoE (HF "glm4_moe", llama.cpp "glm4moe"; GLM-4.5-Air: 46 layers, 128 experts top-8
// + 1 shared, the first dense): a sigmoid router whose choice adds e_score_correction_bias and is
// limited to the best topk_group of n_group groups, the chosen weights renormalised and scaled by
// routed_scaling_factor; shared experts added without a gate; the first first_k_dense_replace
// layers dense; partial RoPE (rotate-half over the first half of each head); q/k/v biases and
// optional q/k norms. The next-token-prediction layer of the released checkpoints (stored after the
// last decoder layer, num_nextn_predict_layers of them) is not read: the model runs without it.
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

void check_groups(const ModelConfig& c, const std::string& label) {
  if (c.n_experts % c.n_expert_groups != 0 || c.n_experts / c.n_expert_groups < 2)
    fail(label + ": " + std::to_string(c.n_experts) + " experts do not split into " +
         std::to_string(c.n_expert_groups) + " groups of at least 2");
  if (c.n_groups_used < 1 || c.n_groups_used > c.n_expert_groups)
    fail(label + ": topk_group " + std::to_string(c.n_groups_used) +
         " is not between 1 and n_group " + std::to_string(c.n_expert_groups));
  if (c.n_experts_used > c.n_groups_used * (c.n_experts / c.n_expert_groups))
    fail(label + ": num_experts_per_tok " + std::to_string(c.n_experts_used) +
         " exceeds the experts of the groups a token may use");
  if (!(std::isfinite(c.routed_scaling) && c.routed_scaling > 0))
    fail(label + ": routed_scaling_factor must be finite and > 0, got " +
         number_text(c.routed_scaling));
}

void dense_first(ModelConfig& c, int n_dense) {
  for (int l = 0; l < c.n_layers; ++l)
    c.layers[size_t(l)].ffn = l < n_dense ? FfnKind::Dense : FfnKind::Moe;
}

class Glm4MoeFamily final : public Family {
 public:
  std::string_view name() const override { return "glm4_moe"; }
  std::vector<std::string_view> hf_model_types() const override { return {"glm4_moe"}; }
  std::string_view gguf_arch() const override { return "glm4moe"; }

  void read_hf(const nlohmann::json& j, ModelConfig& c, const std::string& label) const override {
    const std::string act = j.contains("hidden_act") && j["hidden_act"].is_string()
                                ? j["hidden_act"].get<std::string>()
                                : "silu";
    if (act != "silu") fail(label + ": hidden_act '" + act + "' is not supported (silu)");
    c.qkv_bias = json_bool_or(j, "attention_bias", false);  // q, k and v; o_proj has none
    c.qk_norm = json_bool_or(j, "use_qk_norm", false);
    c.router = RouterKind::Sigmoid;
    c.shared_expert_gated = false;
    // The released checkpoints store their NextN block as model.layers.<num_hidden_layers>.
    if (auto it = j.find("num_nextn_predict_layers");
        it != j.end() && it->is_number_integer() && it->get<int64_t>() != 0)
      c.unread_nextn_layers = json_int(j, "num_nextn_predict_layers", kMaxLayers, label);
    c.n_experts = json_int(j, "n_routed_experts", kMaxExperts, label);
    c.n_experts_used = json_int(j, "num_experts_per_tok", kMaxExperts, label);
    c.expert_hidden_dim = json_int(j, "moe_intermediate_size", kMaxWidth, label);
    const int shared = json_int_or(j, "n_shared_experts", 0, kMaxExperts, label);
    c.shared_expert_hidden_dim = shared * c.expert_hidden_dim;
    c.norm_topk_prob = json_bool_or(j, "norm_topk_prob", true);
    c.routed_scaling = float(json_number_or(j, "routed_scaling_factor", 1.0, label));
    c.n_expert_groups = json_int_or(j, "n_group", 1, kMaxExperts, label);
    c.n_groups_used = json_int_or(j, "topk_group", 1, kMaxExperts, label);
    check_groups(c, label);
    dense_first(c, json_int_or(j, "first_k_dense_replace", 0, kMaxLayers, label));
  }

  void read_gguf(const GgufFile& f, const std::string& p, ModelConfig& c) const override {
    c.router = RouterKind::Sigmoid;
    c.shared_expert_gated = false;
    c.n_experts = gguf_positive(f, p + "expert_count", kMaxExperts);
    c.n_experts_used = gguf_positive(f, p + "expert_used_count", kMaxExperts);
    c.expert_hidden_dim = gguf_positive(f, p + "expert_feed_forward_length", kMaxWidth);
    const int shared = f.find(p + "expert_shared_count")
                           ? gguf_positive(f, p + "expert_shared_count", kMaxExperts)
                           : 0;
    c.shared_expert_hidden_dim = shared * c.expert_hidden_dim;
    if (f.find(p + "expert_weights_norm")) c.norm_topk_prob = f.get_bool(p + "expert_weights_norm");
    c.routed_scaling = f.get_f32_or(p + "expert_weights_scale", 1.0f);
    if (f.find(p + "expert_gating_func") && f.get_u32(p + "expert_gating_func") != 2)
      fail(f.name() + ": " + p + "expert_gating_func " +
           std::to_string(f.get_u32(p + "expert_gating_func")) +
           " is not supported for glm4moe (2, sigmoid)");
    c.n_expert_groups = gguf_positive_or(f, p + "expert_group_count", 1, kMaxExperts);
    c.n_groups_used = gguf_positive_or(f, p + "expert_group_used_count", 1, kMaxExperts);
    check_groups(c, f.name());
    const int n_dense = f.find(p + "leading_dense_block_count")
                            ? int(f.get_u32(p + "leading_dense_block_count"))
                            : 0;
    dense_first(c, n_dense);
  }

  void write_gguf(GgufWriter& w, const std::string& p, const ModelConfig& c) const override {
    w.set_u32(p + "attention.key_length", uint32_t(c.head_dim));
    w.set_u32(p + "attention.value_length", uint32_t(c.head_dim));
    w.set_u32(p + "rope.dimension_count", uint32_t(c.rotary_dim));
    w.set_u32(p + "expert_count", uint32_t(c.n_experts));
    w.set_u32(p + "expert_used_count", uint32_t(c.n_experts_used));
    w.set_u32(p + "expert_group_count", uint32_t(c.n_expert_groups));
    w.set_u32(p + "expert_group_used_count", uint32_t(c.n_groups_used));
    w.set_u32(p + "expert_feed_forward_length", uint32_t(c.expert_hidden_dim));
    w.set_u32(
        p + "expert_shared_count",
        uint32_t(c.expert_hidden_dim > 0 ? c.shared_expert_hidden_dim / c.expert_hidden_dim : 0));
    int n_dense = 0;
    while (n_dense < c.n_layers && c.layers[size_t(n_dense)].ffn == FfnKind::Dense) ++n_dense;
    w.set_u32(p + "leading_dense_block_count", uint32_t(n_dense));
    w.set_u32(p + "expert_gating_func", 2);
    w.set_f32(p + "expert_weights_scale", c.routed_scaling);
    w.set(p + "expert_weights_norm", GgufValue::make_bool(c.norm_topk_prob));
    w.set_u32(p + "nextn_predict_layers", 0);
  }

  bool gguf_leading_dense_layers() const override { return true; }

  void tensors(const ModelConfig& c, ModelWeights& w, int layer,
               std::vector<TensorDef>& out) const override {
    if (layer < 0) return model_io_tensors(c, w, out);
    decoder_layer_tensors(c, w.layers[size_t(layer)], layer,
                          {"post_attention_norm", false, ExpertStorage::PerExpert}, out);
  }
};

}  // namespace

const Family& glm4_moe_family() {
  static const Glm4MoeFamily f;
  return f;
}

}  // namespace fak
