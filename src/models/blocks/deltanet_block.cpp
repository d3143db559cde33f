// Gated DeltaNet (Qwen3.5 linear attention): its config fields and tensors. What the layer
// computes is in ops/deltanet.h; llama.cpp's qwen35 layout against HF's in qwen35_gguf.h.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "models/blocks/blocks.h"
#include "models/config_fields.h"

namespace fak {

void deltanet_tensors(const ModelConfig& c, DeltaNetWeights& d, const LayerNames& n,
                      std::vector<TensorDef>& out) {
  const std::string hf = n.hf + "linear_attn.";
  const int64_t nv = c.linear_num_value_heads, dv = c.linear_value_head_dim;
  const int64_t key_dim = int64_t(c.linear_num_key_heads) * c.linear_key_head_dim;
  const int64_t value_dim = nv * dv, conv_dim = 2 * key_dim + value_dim;
  // llama.cpp tiles the value heads when there are fewer key heads: runs of per_head rows (or
  // columns) from offset move.
  auto tiled = [&d](TensorDef e, GgufOrder order, int64_t offset, int64_t per_head) {
    e.gguf_order = order;
    e.order_offset = offset;
    e.order_per_head = per_head;
    e.v_heads_tiled = &d.tiled_v_heads;
    return e;
  };
  out.push_back(tiled(matrix_entry(d.in_proj_qkv, conv_dim, c.dim, hf + "in_proj_qkv.weight",
                                   n.gguf + "attn_qkv.weight", "attn_qkv"),
                      GgufOrder::VHeadRows, 2 * key_dim, dv));
  out.push_back(tiled(matrix_entry(d.in_proj_z, value_dim, c.dim, hf + "in_proj_z.weight",
                                   n.gguf + "attn_gate.weight", "attn_gate"),
                      GgufOrder::VHeadRows, 0, dv));
  out.push_back(tiled(matrix_entry(d.in_proj_b, nv, c.dim, hf + "in_proj_b.weight",
                                   n.gguf + "ssm_beta.weight", "ssm_beta"),
                      GgufOrder::VHeadRows, 0, 1));
  out.push_back(tiled(matrix_entry(d.in_proj_a, nv, c.dim, hf + "in_proj_a.weight",
                                   n.gguf + "ssm_alpha.weight", "ssm_alpha"),
                      GgufOrder::VHeadRows, 0, 1));
  out.push_back(tiled(matrix_entry(d.out_proj, c.dim, value_dim, hf + "out_proj.weight",
                                   n.gguf + "ssm_out.weight", "ssm_out"),
                      GgufOrder::VHeadCols, 0, dv));
  // The conv kernel [conv_dim][kernel] (HF [conv_dim, 1, kernel]; GGUF an f32 matrix).
  TensorDef conv =
      vector_entry(d.conv1d, conv_dim, hf + "conv1d.weight", n.gguf + "ssm_conv1d.weight");
  conv.cols = c.linear_conv_kernel;
  conv.hf_layout = HfLayout::Conv;
  out.push_back(tiled(std::move(conv), GgufOrder::VHeadRows, 2 * key_dim, dv));
  TensorDef dt = vector_entry(d.dt_bias, nv, hf + "dt_bias", n.gguf + "ssm_dt.bias");
  dt.init = TensorDef::Init::Ones;  // HF's initial value
  out.push_back(tiled(std::move(dt), GgufOrder::VHeadRows, 0, 1));
  // -exp(A_log), rounded to f32 once at load: the form llama.cpp stores (ssm_a), so an HF
  // checkpoint and its GGUF compute the same decay bit for bit.
  out.push_back(tiled(vector_entry(d.ssm_a, nv, hf + "A_log", n.gguf + "ssm_a", HfValue::NegExp),
                      GgufOrder::VHeadRows, 0, 1));
  // The gated RMSNorm's weight is used as stored (not zero-centred) in both formats.
  out.push_back(norm_entry(d.norm, dv, hf + "norm.weight", n.gguf + "ssm_norm.weight"));
}

void read_deltanet_hf(const nlohmann::json& j, ModelConfig& c, const std::string& label) {
  c.qk_norm = true;
  c.attn_output_gate = json_bool_or(j, "attn_output_gate", true);
  c.norm_plus_one = true;
  c.linear_conv_kernel = json_int(j, "linear_conv_kernel_dim", kMaxWidth, label);
  c.linear_key_head_dim = json_int(j, "linear_key_head_dim", kMaxWidth, label);
  c.linear_value_head_dim = json_int(j, "linear_value_head_dim", kMaxWidth, label);
  c.linear_num_key_heads = json_int(j, "linear_num_key_heads", kMaxWidth, label);
  c.linear_num_value_heads = json_int(j, "linear_num_value_heads", kMaxWidth, label);
  c.mtp_layers = json_int_or(j, "mtp_num_hidden_layers", 0, kMaxLayers, label);
  if (c.linear_num_value_heads % c.linear_num_key_heads != 0)
    fail(label + ": linear_num_value_heads must be a multiple of linear_num_key_heads");
  // Without layer_types: every full_attention_interval-th layer is attention, the rest DeltaNet.
  if (!j.contains("layer_types") || !j["layer_types"].is_array()) {
    const int interval = json_int_or(j, "full_attention_interval", 4, kMaxLayers, label);
    for (int i = 0; i < c.n_layers; ++i)
      c.layers[size_t(i)].mixer =
          (i + 1) % interval == 0 ? LayerKind::FullAttention : LayerKind::LinearAttention;
  }
}

void read_deltanet_gguf(const GgufFile& f, const std::string& p, ModelConfig& c) {
  c.qk_norm = true;
  c.attn_output_gate = true;
  c.norm_plus_one = true;  // the family's convention; the file already holds 1 + w
  c.linear_conv_kernel = gguf_positive(f, p + "ssm.conv_kernel", kMaxWidth);
  c.linear_key_head_dim = gguf_positive(f, p + "ssm.state_size", kMaxWidth);
  c.linear_num_key_heads = gguf_positive(f, p + "ssm.group_count", kMaxWidth);
  c.linear_num_value_heads = gguf_positive(f, p + "ssm.time_step_rank", kMaxWidth);
  const int inner = gguf_positive(f, p + "ssm.inner_size", kMaxWidth);
  if (inner % c.linear_num_value_heads != 0 ||
      c.linear_num_value_heads % c.linear_num_key_heads != 0)
    fail(f.name() +
         ": ssm.inner_size must be a multiple of ssm.time_step_rank, and that of ssm.group_count");
  c.linear_value_head_dim = inner / c.linear_num_value_heads;
  // Which layers are recurrent: an explicit per-layer list, else every layer but each
  // full_attention_interval-th (llama.cpp's default interval is 4).
  if (const GgufValue* rec = f.find(p + "attention.recurrent_layers")) {
    if (rec->type != GgufType::ARRAY || rec->array.size() < size_t(c.n_layers))
      fail(f.name() + ": " + p + "attention.recurrent_layers must list every layer");
    for (int i = 0; i < c.n_layers; ++i)
      if (rec->array.u64(size_t(i)) != 0) c.layers[size_t(i)].mixer = LayerKind::LinearAttention;
  } else {
    const int interval = gguf_positive_or(f, p + "full_attention_interval", 4, kMaxLayers);
    for (int i = 0; i < c.n_layers; ++i)
      if ((i + 1) % interval != 0) c.layers[size_t(i)].mixer = LayerKind::LinearAttention;
  }
}

namespace {

// qwen35 files describe the layer pattern by full_attention_interval alone.
int full_attention_interval(const ModelConfig& c) {
  int interval = 0;
  for (int l = 0; l < c.n_layers && interval == 0; ++l)
    if (c.layers[size_t(l)].mixer == LayerKind::FullAttention) interval = l + 1;
  for (int l = 0; l < c.n_layers; ++l)
    if (interval == 0 ||
        (c.layers[size_t(l)].mixer == LayerKind::FullAttention) != ((l + 1) % interval == 0))
      fail(
          "GGUF export: llama.cpp's Qwen3.5 files describe the layer pattern by "
          "full_attention_interval; this model's layer_types do not follow one");
  return interval;
}

}  // namespace

void write_deltanet_gguf(GgufWriter& w, const std::string& p, const ModelConfig& c) {
  w.set_u32(p + "attention.key_length", uint32_t(c.head_dim));
  w.set_u32(p + "attention.value_length", uint32_t(c.head_dim));
  w.set_u32(p + "rope.dimension_count", uint32_t(c.rotary_dim));
  // Interleaved M-RoPE sections, required by llama.cpp; with text positions (all three equal)
  // they do not change the rotation. Its converter's default, as in the released configs.
  const int32_t sections[4] = {11, 11, 10, 0};
  w.set(p + "rope.dimension_sections",
        GgufValue::make_array(GgufArray::numbers(GgufType::I32, sections, 4)));
  w.set_u32(p + "ssm.conv_kernel", uint32_t(c.linear_conv_kernel));
  w.set_u32(p + "ssm.state_size", uint32_t(c.linear_key_head_dim));
  w.set_u32(p + "ssm.group_count", uint32_t(c.linear_num_key_heads));
  w.set_u32(p + "ssm.time_step_rank", uint32_t(c.linear_num_value_heads));
  w.set_u32(p + "ssm.inner_size", uint32_t(c.linear_num_value_heads * c.linear_value_head_dim));
  w.set_u32(p + "full_attention_interval", uint32_t(full_attention_interval(c)));
}

}  // namespace fak
