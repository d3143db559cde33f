#include "models/gguf_export.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <regex>

#include "core/error.h"
#include "io/gguf_writer.h"
#include "models/family.h"
#include "models/gguf_loader.h"
#include "models/gguf_tokenizer.h"
#include "models/qwen35_gguf.h"
#include "models/rope.h"
#include "models/tensor_table.h"
#include "tokenizer/tokenizer.h"

namespace fak {

std::string ExportStats::summary() const {
  std::string t;
  for (const auto& [name, n] : types) t += (t.empty() ? "" : " ") + name + ":" + std::to_string(n);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", double(bytes) / (1 << 20));
  return std::to_string(tensors) + " tensors, " + buf + " (" + t + ")";
}

namespace {

// Tensor data that must outlive GgufWriter::write.
struct Collector {
  GgufWriter w;
  std::vector<std::vector<uint8_t>> buffers;
  ExportStats stats;

  void add(const std::string& name, WType type, std::vector<int64_t> dims,
           std::vector<uint8_t> data) {
    buffers.push_back(std::move(data));
    const auto& b = buffers.back();
    w.add_tensor(name, ggml_type_of(type), std::move(dims), {b.data(), b.size()});
    stats.tensors++;
    stats.bytes += b.size();
    stats.types[std::string(wtype_name(type))]++;
  }
};

// Whether a GGUF reader computing 0.1 ln(factor) + 1 from the stored (float32) factor gets the
// same float32 attention factor Rope uses; if not, the factor is written out.
bool yarn_default_attention(const ModelConfig& c) {
  return float(c.rope_attention_factor) == float(yarn_mscale(float(c.rope_factor), 1.0));
}

// Whether the attention factor is YaRN's default up to rounding (what llama.cpp computes itself):
// a factor like 4/3 is not a float32, and its last bit is no reason to warn.
bool yarn_near_default_attention(const ModelConfig& c) {
  const double d = yarn_mscale(c.rope_factor, 1.0);
  return std::fabs(c.rope_attention_factor - d) <= 1e-6 * d;
}

// f32 values as the bytes of a GGUF tensor.
std::vector<uint8_t> float_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> bytes(4 * v.size());
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return bytes;
}

// Whether d's layer holds its value heads in llama.cpp's tiled order already (loaded so from a
// GGUF: DeltaNetWeights::tiled_v_heads).
bool already_tiled(const TensorDef& d) {
  return d.v_heads_tiled && *d.v_heads_tiled;
}

// A vector in llama.cpp's order (the inverse of the loader's).
std::vector<float> gguf_ordered(const ModelConfig& c, const TensorDef& d, std::vector<float> v) {
  switch (d.gguf_order) {
    case GgufOrder::RopePairs: {
      std::vector<float> out(v.size());
      for (size_t g = 0; g < v.size(); ++g)
        out[g] = v[size_t(llama_unpermuted_row(int64_t(g), int(d.order_per_head)))];
      return out;
    }
    case GgufOrder::VHeadRows: {
      const VHeadOrder order{c.linear_num_key_heads, c.linear_num_value_heads};
      if (order.identity() || already_tiled(d)) return v;
      return reorder_v_vec(v, d.order_offset * d.cols, d.order_per_head * d.cols, order, true);
    }
    default:
      return v;
  }
}

// A matrix's rows (or columns) in llama.cpp's order, reordered on the source rows so any output
// type can follow. `keep` holds reordered bytes while `m` points at them.
WeightMatrix gguf_ordered(const ModelConfig& c, const TensorDef& d, WeightMatrix m,
                          std::vector<uint8_t>& keep) {
  const VHeadOrder order{c.linear_num_key_heads, c.linear_num_value_heads};
  switch (d.gguf_order) {
    case GgufOrder::AsIs:
      return m;
    case GgufOrder::RopePairs:
      keep.resize(m.bytes());
      for (int64_t g = 0; g < m.rows; ++g)
        std::memcpy(keep.data() + size_t(g) * m.row_bytes,
                    m.row(llama_unpermuted_row(g, int(d.order_per_head))), m.row_bytes);
      break;
    case GgufOrder::VHeadRows:
      if (order.identity() || already_tiled(d)) return m;
      keep = reorder_v_rows(static_cast<const uint8_t*>(m.data), m.rows, m.row_bytes,
                            d.order_offset, d.order_per_head, order, true);
      break;
    case GgufOrder::VHeadCols:
      if (order.identity() || already_tiled(d)) return m;
      keep = reorder_v_cols(m, d.order_per_head, order, true, d.gguf);
      break;
  }
  m.data = keep.data();
  return m;
}

}  // namespace

void write_gguf_config(GgufWriter& w, const ModelConfig& c, FileType ft, const std::string& name) {
  const std::string arch(c.family->gguf_arch());
  const std::string p = arch + ".";
  w.set_string("general.architecture", arch);
  w.set_string("general.type", "model");
  w.set_string("general.name", name);
  w.set_u32("general.file_type", uint32_t(ft));
  w.set_u32("general.quantization_version", 2);  // GGML_QNT_VERSION, written by the converter
  // As llama.cpp's converter: the MTP head is one more block, after the decoder's.
  w.set_u32(p + "block_count", uint32_t(c.n_layers + std::min(c.mtp_layers, 1)));
  if (c.mtp_layers > 0) w.set_u32(p + "nextn_predict_layers", 1);
  w.set_u32(p + "context_length", uint32_t(c.max_seq_len));
  w.set_u32(p + "embedding_length", uint32_t(c.dim));
  if (c.hidden_dim > 0) w.set_u32(p + "feed_forward_length", uint32_t(c.hidden_dim));
  w.set_u32(p + "attention.head_count", uint32_t(c.n_heads));
  w.set_u32(p + "attention.head_count_kv", uint32_t(c.n_kv_heads));
  w.set_f32(p + "rope.freq_base", float(c.rope_theta));
  w.set_f32(p + "attention.layer_norm_rms_epsilon", c.rms_eps);
  if (c.head_dim != c.dim / c.n_heads) {
    w.set_u32(p + "attention.key_length", uint32_t(c.head_dim));
    w.set_u32(p + "attention.value_length", uint32_t(c.head_dim));
  }
  if (c.rope_scaling == RopeScaling::Linear) {
    w.set_string(p + "rope.scaling.type", "linear");
    w.set_f32(p + "rope.scaling.factor", float(c.rope_factor));
  } else if (c.rope_scaling == RopeScaling::Yarn) {
    // The keys convert_hf_to_gguf.py writes for rope_type yarn.
    w.set_string(p + "rope.scaling.type", "yarn");
    w.set_f32(p + "rope.scaling.factor", float(c.rope_factor));
    w.set_u32(p + "rope.scaling.original_context_length", uint32_t(c.rope_original_max_pos));
    w.set_f32(p + "rope.scaling.yarn_beta_fast", float(c.rope_yarn_beta_fast));
    w.set_f32(p + "rope.scaling.yarn_beta_slow", float(c.rope_yarn_beta_slow));
    // Only an attention factor other than the default needs saying (HF's attention_factor, or
    // the mscale / mscale_all_dim ratio resolved at parse time); float32 is what Rope uses.
    if (!yarn_default_attention(c))
      w.set_f32(p + "rope.scaling.yarn_attn_factor", float(c.rope_attention_factor));
    if (!c.rope_yarn_truncate) w.set_bool(p + "rope.scaling.yarn_truncate", false);
  }
  c.family->write_gguf(w, p, c);
}

WType gguf_tensor_type(const ModelConfig& c, FileType ft, const TensorDef& d, int64_t cols) {
  // The router and the shared expert's gate stay f32 as llama.cpp's converter writes them.
  if (d.keep_float) return WType::F32;
  return choose_wtype(ft, d.role, std::max(d.layer, 0), c.n_layers, cols, c.tie_embeddings,
                      c.n_experts, c.n_kv_heads > 0 ? c.n_heads / c.n_kv_heads : 1);
}

ExportStats export_gguf(const Model& model, FileType ft, const std::filesystem::path& out) {
  const ModelConfig& c = model.config();
  if (c.rope_scaling == RopeScaling::Llama3)
    fail(
        "GGUF export of llama3 rope scaling (llama.cpp writes it as a rope_freqs tensor) is not "
        "supported yet");
  if (!model.tokenizer())
    fail(model.path().string() + ": no tokenizer.json; a GGUF needs the vocabulary");
  Collector col;
  write_gguf_config(col.w, c, ft, model.path().filename().string());
  write_gguf_tokenizer(col.w, model.tokenizer()->spec(), c.vocab);
  if (c.is_moe() && !c.norm_topk_prob)
    col.stats.warnings.push_back(
        "norm_topk_prob is false: written as " + std::string(c.family->gguf_arch()) +
        ".expert_weights_norm = false, which fak reads back but llama.cpp ignores (it always "
        "renormalises the chosen experts' weights, so it would run another model)");
  if (c.rope_scaling == RopeScaling::Yarn && !c.rope_yarn_truncate)
    col.stats.warnings.push_back(
        "rope_scaling truncate is false: written as " + std::string(c.family->gguf_arch()) +
        ".rope.scaling.yarn_truncate = false, which fak reads back but llama.cpp has no key for "
        "(it always rounds the YaRN correction range to whole dimensions, so it would run "
        "another model)");
  if (c.rope_scaling == RopeScaling::Yarn && !yarn_near_default_attention(c))
    col.stats.warnings.push_back(
        "the YaRN attention factor (" + number_text(c.rope_attention_factor) +
        ") is not 0.1 ln(factor) + 1: written as " + std::string(c.family->gguf_arch()) +
        ".rope.scaling.yarn_attn_factor as llama.cpp's converter does, which fak reads back but "
        "llama.cpp replaces with its own 0.1 ln(factor) + 1, so it would run another model");
  // Dense layers llama.cpp cannot place: any, or (glm4moe) any after the first sparse one.
  const auto sparse = [](const LayerSlot& s) { return s.ffn == FfnKind::Moe; };
  const auto first_sparse = std::find_if(c.layers.begin(), c.layers.end(), sparse);
  const bool stray_dense =
      std::find_if(c.family->gguf_leading_dense_layers() ? first_sparse : c.layers.begin(),
                   c.layers.end(), std::not_fn(sparse)) != c.layers.end();
  if (c.is_moe() && stray_dense)
    col.stats.warnings.push_back(
        "some layers are dense (mlp_only_layers / decoder_sparse_step): written with ffn_gate / "
        "ffn_up / ffn_down, which fak reads but llama.cpp's " +
        std::string(c.family->gguf_arch()) + " does not");

  if (c.is_hybrid() && c.linear_key_head_dim != c.linear_value_head_dim)
    col.stats.warnings.push_back(
        "linear_key_head_dim (" + std::to_string(c.linear_key_head_dim) +
        ") differs from linear_value_head_dim (" + std::to_string(c.linear_value_head_dim) +
        "): fak reads the file back, but llama.cpp assumes they are equal and refuses it");

  auto type_of = [&](const TensorDef& d, const WeightMatrix& m) {
    return gguf_tensor_type(c, ft, d, m.cols);
  };
  // note: the walk binds entries into the model's own weights; it only reads through them.
  ModelWeights& w = const_cast<ModelWeights&>(model.weights());
  for (int l = -1; l < table_parts_end(c); ++l) {
    for (const TensorDef& d : tensor_table_part(c, w, l)) {
      switch (d.kind) {
        case TensorKind::Vector: {
          // 1-D tensors and the conv kernel are f32 in llama.cpp files.
          std::vector<int64_t> dims = {d.rows};
          if (d.cols > 1) dims = {d.cols, d.rows};
          col.add(d.gguf, WType::F32, dims, float_bytes(gguf_ordered(c, d, *d.vector)));
          break;
        }
        case TensorKind::Matrix: {
          std::vector<uint8_t> keep;
          const WeightMatrix m = gguf_ordered(c, d, *d.matrix, keep);
          const WType t = type_of(d, m);
          col.add(d.gguf, t, {m.cols, m.rows}, convert_matrix(m, t));
          break;
        }
        case TensorKind::Experts: {
          // One [n_experts, rows, cols] tensor: each expert converted in turn.
          const WType t = type_of(d, d.experts->front());
          std::vector<uint8_t> all;
          all.reserve(wtype_row_bytes(t, d.cols) * size_t(d.rows) * size_t(d.n_experts));
          for (const WeightMatrix& e : *d.experts) {
            std::vector<uint8_t> one = convert_matrix(e, t);
            all.insert(all.end(), one.begin(), one.end());
          }
          col.add(d.gguf, t, {d.cols, d.rows, int64_t(d.n_experts)}, std::move(all));
          break;
        }
      }
    }
  }
  col.w.write(out);
  return col.stats;
}

ExportStats requantize_gguf(const std::filesystem::path& in, const std::filesystem::path& out,
                            FileType ft) {
  const GgufFile f = GgufFile::open(in);
  const ModelConfig c = gguf_model_config(f);  // refuses architectures fak cannot run
  const std::string arch = f.get_string("general.architecture");
  const int n_layers = int(f.get_u64(arch + ".block_count"));
  const bool tied = f.tensor("output.weight") == nullptr;
  Collector col;
  for (const GgufKv& kv : f.metadata())
    if (kv.key != "general.alignment") col.w.set(kv.key, kv.value);
  col.w.set_u32("general.file_type", uint32_t(ft));
  col.w.set_u32("general.quantization_version", 2);
  static const std::regex kBlock(R"(blk\.(\d+)\.(\w+)\.weight)");
  for (const GgufTensor& t : f.tensors()) {
    const std::optional<WType> src = wtype_from_ggml(t.ggml_type);
    // Vectors (biases included: gpt-oss's expert biases are 2-D), the DeltaNet conv kernel, the
    // MoE router and shared-expert gate (llama.cpp quantises only 2-D and 3-D '*weight' tensors
    // and keeps those f32) and types fak cannot read are copied as they are.
    const bool weight = t.name.size() >= 6 && t.name.compare(t.name.size() - 6, 6, "weight") == 0;
    const bool matrix = (t.dims.size() == 2 || t.dims.size() == 3) && weight;
    if (!matrix || !src || t.name.find(".ssm_conv1d.") != std::string::npos ||
        t.name.find(".ffn_gate_inp") != std::string::npos) {
      col.w.add_tensor(t.name, t.ggml_type, t.dims, {t.data, t.nbytes});
      col.stats.tensors++;
      col.stats.bytes += t.nbytes;
      continue;
    }
    // The role is llama.cpp's name for the tensor: "token_embd", "output", or the part between
    // "blk.N." and ".weight" ("attn_v", "ffn_down_exps").
    std::string role = t.name.substr(0, t.name.rfind(".weight"));
    int layer = 0;
    std::smatch m;
    if (std::regex_match(t.name, m, kBlock)) {
      layer = std::stoi(m[1]);
      role = m[2];
    }
    // A stack of experts converts as its rows one after another.
    const int64_t rows = t.dims[1] * (t.dims.size() == 3 ? t.dims[2] : 1);
    const WeightMatrix wm{*src, t.data, rows, t.dims[0], wtype_row_bytes(*src, t.dims[0])};
    const WType type = choose_wtype(ft, role, layer, n_layers, wm.cols, tied, c.n_experts,
                                    c.n_kv_heads > 0 ? c.n_heads / c.n_kv_heads : 1);
    col.add(t.name, type, t.dims, convert_matrix(wm, type));
  }
  col.w.write(out);
  return col.stats;
}

}  // namespace fak
