// The sparse Mixture-of-Experts block (Qwen3 MoE, Qwen3.5 MoE): its config fields and tensors.
// What it computes is in forward.cpp (moe_block) and the backends' moe ops.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "models/blocks/blocks.h"
#include "models/config_fields.h"

namespace fak {

void moe_tensors(const ModelConfig& c, MoeWeights& m, const LayerNames& n, ExpertStorage storage,
                 std::vector<TensorDef>& out) {
  const std::string hf = n.hf + "mlp.";
  const int64_t I = c.expert_hidden_dim;
  // The router stays in a float type: llama-quantize never quantises ffn_gate_inp, whose rows
  // decide which experts run.
  TensorDef router = matrix_entry(m.router, c.n_experts, c.dim, hf + "gate.weight",
                                  n.gguf + "ffn_gate_inp.weight", "ffn_gate_inp");
  router.keep_float = true;
  out.push_back(std::move(router));
  if (c.router == RouterKind::Sigmoid)
    out.push_back(vector_entry(m.router_bias, c.n_experts, hf + "gate.e_score_correction_bias",
                               n.gguf + "exp_probs_b.bias"));
  // Either spelling loads: per-expert tensors (the released Qwen3 MoE checkpoints) or fused ones
  // (transformers >= 5 writes Qwen3.5 MoE so); `storage` says which `fak synth` writes.
  const std::string per = hf + "experts.{e}.";
  const std::string fused = hf + "experts.";
  auto spelled = [&](TensorDef d, const std::string& per_name, const std::string& fused_name,
                     HfLayout fused_layout) {
    const bool per_first = storage == ExpertStorage::PerExpert;
    d.hf = per_first ? per + per_name : fused + fused_name;
    d.hf_layout = per_first ? HfLayout::PerExpert : fused_layout;
    d.hf_alt = per_first ? fused + fused_name : per + per_name;
    d.hf_alt_layout = per_first ? fused_layout : HfLayout::PerExpert;
    return d;
  };
  out.push_back(spelled(experts_entry(m.gate, I, c.dim, "", HfLayout::Plain,
                                      n.gguf + "ffn_gate_exps.weight", "ffn_gate_exps"),
                        "gate_proj.weight", "gate_up_proj", HfLayout::FusedFirst));
  out.push_back(spelled(experts_entry(m.up, I, c.dim, "", HfLayout::Plain,
                                      n.gguf + "ffn_up_exps.weight", "ffn_up_exps"),
                        "up_proj.weight", "gate_up_proj", HfLayout::FusedSecond));
  out.push_back(spelled(experts_entry(m.down, c.dim, I, "", HfLayout::Plain,
                                      n.gguf + "ffn_down_exps.weight", "ffn_down_exps"),
                        "down_proj.weight", "down_proj", HfLayout::Stacked));
  if (c.shared_expert_hidden_dim > 0) {
    const int64_t S = c.shared_expert_hidden_dim;
    // Qwen: one shared_expert behind a gate; GLM: shared_experts (their widths summed), no gate.
    const std::string sh = hf + (c.shared_expert_gated ? "shared_expert." : "shared_experts.");
    out.push_back(matrix_entry(m.shared.gate, S, c.dim, sh + "gate_proj.weight",
                               n.gguf + "ffn_gate_shexp.weight", "ffn_gate_shexp"));
    out.push_back(matrix_entry(m.shared.up, S, c.dim, sh + "up_proj.weight",
                               n.gguf + "ffn_up_shexp.weight", "ffn_up_shexp"));
    out.push_back(matrix_entry(m.shared.down, c.dim, S, sh + "down_proj.weight",
                               n.gguf + "ffn_down_shexp.weight", "ffn_down_shexp"));
    if (!c.shared_expert_gated) return;
    TensorDef gate = matrix_entry(m.shared_gate, 1, c.dim, hf + "shared_expert_gate.weight",
                                  n.gguf + "ffn_gate_inp_shexp.weight", "ffn_gate_inp_shexp");
    gate.keep_float = true;
    out.push_back(std::move(gate));
  }
}

void read_moe_hf(const nlohmann::json& j, ModelConfig& c, const std::string& label) {
  c.n_experts = json_int(j, "num_experts", kMaxExperts, label);
  c.n_experts_used = json_int(j, "num_experts_per_tok", kMaxExperts, label);
  c.expert_hidden_dim = json_int(j, "moe_intermediate_size", kMaxWidth, label);
  c.shared_expert_hidden_dim =
      json_int_or(j, "shared_expert_intermediate_size", 0, kMaxWidth, label);
  c.norm_topk_prob = json_bool_or(j, "norm_topk_prob", true);
  // HF Qwen3MoeDecoderLayer: sparse unless listed in mlp_only_layers, and then only every
  // decoder_sparse_step-th layer (counting from 1).
  const int step = json_int_or(j, "decoder_sparse_step", 1, kMaxLayers, label);
  std::vector<bool> dense_only(size_t(c.n_layers), false);
  if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
    const nlohmann::json& only = j["mlp_only_layers"];
    if (!only.is_array()) fail(label + ": 'mlp_only_layers' must be a list of layer indices");
    for (const nlohmann::json& e : only) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= c.n_layers)
        fail(label + ": 'mlp_only_layers' entry " + e.dump() + " is not a layer index (0.." +
             std::to_string(c.n_layers - 1) + ")");
      dense_only[size_t(e.get<int64_t>())] = true;
    }
  }
  for (int l = 0; l < c.n_layers; ++l)
    c.layers[size_t(l)].ffn =
        !dense_only[size_t(l)] && (l + 1) % step == 0 ? FfnKind::Moe : FfnKind::Dense;
}

void read_moe_gguf(const GgufFile& f, const std::string& p, ModelConfig& c) {
  c.n_experts = gguf_positive(f, p + "expert_count", kMaxExperts);
  c.n_experts_used = gguf_positive(f, p + "expert_used_count", kMaxExperts);
  c.expert_hidden_dim = gguf_positive(f, p + "expert_feed_forward_length", kMaxWidth);
  c.shared_expert_hidden_dim =
      gguf_positive_or(f, p + "expert_shared_feed_forward_length", 0, kMaxWidth);
  // llama.cpp's qwen3moe / qwen35moe always renormalise the chosen experts' weights; a file fak
  // wrote from a norm_topk_prob: false checkpoint says so here (llama.cpp ignores the key).
  if (f.find(p + "expert_weights_norm")) c.norm_topk_prob = f.get_bool(p + "expert_weights_norm");
  // A layer is sparse where the file has its router or experts (llama.cpp's archs: every layer;
  // a file fak wrote from a checkpoint with dense layers: those have ffn_gate / ffn_up / ffn_down
  // instead), so a missing router is named as missing.
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    bool sparse = false;
    for (const char* t : {"ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"})
      sparse |= f.tensor(b + t + ".weight") != nullptr;
    c.layers[size_t(l)].ffn = sparse ? FfnKind::Moe : FfnKind::Dense;
  }
}

void write_moe_gguf(GgufWriter& w, const std::string& p, const ModelConfig& c) {
  w.set_u32(p + "expert_count", uint32_t(c.n_experts));
  w.set_u32(p + "expert_used_count", uint32_t(c.n_experts_used));
  w.set_u32(p + "expert_feed_forward_length", uint32_t(c.expert_hidden_dim));
  if (c.shared_expert_hidden_dim > 0)
    w.set_u32(p + "expert_shared_feed_forward_length", uint32_t(c.shared_expert_hidden_dim));
  if (!c.norm_topk_prob) w.set(p + "expert_weights_norm", GgufValue::make_bool(false));
}

}  // namespace fak
