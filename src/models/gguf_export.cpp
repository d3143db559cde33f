#include "models/gguf_export.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <regex>

#include "core/error.h"
#include "io/gguf_writer.h"
#include "models/gguf_loader.h"
#include "models/gguf_tokenizer.h"
#include "models/qwen35_gguf.h"
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

  // 1-D tensors (norms, biases) are F32 in llama.cpp files.
  void add_vec(const std::string& name, const std::vector<float>& v) {
    std::vector<uint8_t> bytes(4 * v.size());
    std::memcpy(bytes.data(), v.data(), bytes.size());
    add(name, WType::F32, {int64_t(v.size())}, std::move(bytes));
  }
};

// Rows reordered for llama.cpp's interleaved RoPE: GGUF row g is HF row llama_unpermuted_row(g).
std::vector<uint8_t> permute_rows(const std::vector<uint8_t>& src, int64_t rows, size_t row_bytes,
                                  int head_dim) {
  std::vector<uint8_t> out(src.size());
  for (int64_t g = 0; g < rows; ++g)
    std::memcpy(out.data() + size_t(g) * row_bytes,
                src.data() + size_t(llama_unpermuted_row(g, head_dim)) * row_bytes, row_bytes);
  return out;
}

std::vector<float> permute_vec(const std::vector<float>& v, int head_dim) {
  std::vector<float> out(v.size());
  for (size_t g = 0; g < v.size(); ++g)
    out[g] = v[size_t(llama_unpermuted_row(int64_t(g), head_dim))];
  return out;
}

// llama.cpp's name for the architecture (HF's qwen3_5_text is its qwen35).
std::string gguf_arch(const ModelConfig& c) {
  return c.arch == Arch::Qwen35 ? "qwen35" : arch_name(c.arch);
}

// qwen35: every full_attention_interval-th layer is attention, the rest DeltaNet.
int full_attention_interval(const ModelConfig& c) {
  int interval = 0;
  for (int l = 0; l < c.n_layers && interval == 0; ++l)
    if (c.layer_kinds[size_t(l)] == LayerKind::FullAttention) interval = l + 1;
  for (int l = 0; l < c.n_layers; ++l)
    if (interval == 0 ||
        (c.layer_kinds[size_t(l)] == LayerKind::FullAttention) != ((l + 1) % interval == 0))
      fail(
          "GGUF export: qwen35 files describe the layer pattern by full_attention_interval; this "
          "model's layer_types do not follow one");
  return interval;
}

void write_hybrid_config(GgufWriter& w, const ModelConfig& c, const std::string& p) {
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

void write_config(GgufWriter& w, const ModelConfig& c, FileType ft, const std::string& name) {
  const std::string arch = gguf_arch(c);
  const std::string p = arch + ".";
  w.set_string("general.architecture", arch);
  w.set_string("general.type", "model");
  w.set_string("general.name", name);
  w.set_u32("general.file_type", uint32_t(ft));
  w.set_u32("general.quantization_version", 2);  // GGML_QNT_VERSION, written by the converter
  w.set_u32(p + "block_count", uint32_t(c.n_layers));
  w.set_u32(p + "context_length", uint32_t(c.max_seq_len));
  w.set_u32(p + "embedding_length", uint32_t(c.dim));
  w.set_u32(p + "feed_forward_length", uint32_t(c.hidden_dim));
  w.set_u32(p + "attention.head_count", uint32_t(c.n_heads));
  w.set_u32(p + "attention.head_count_kv", uint32_t(c.n_kv_heads));
  w.set_f32(p + "rope.freq_base", float(c.rope_theta));
  w.set_f32(p + "attention.layer_norm_rms_epsilon", c.rms_eps);
  if (c.head_dim != c.dim / c.n_heads || c.arch == Arch::Qwen3) {
    w.set_u32(p + "attention.key_length", uint32_t(c.head_dim));
    w.set_u32(p + "attention.value_length", uint32_t(c.head_dim));
  }
  if (c.arch == Arch::Llama) {
    w.set_u32(p + "vocab_size", uint32_t(c.vocab));
    w.set_u32(p + "rope.dimension_count", uint32_t(c.rotary_dim));
  }
  if (c.rope_scaling == RopeScaling::Linear) {
    w.set_string(p + "rope.scaling.type", "linear");
    w.set_f32(p + "rope.scaling.factor", float(c.rope_factor));
  }
  if (c.arch == Arch::Qwen35) write_hybrid_config(w, c, p);
}

// A DeltaNet layer in llama.cpp's qwen35 conventions (qwen35_gguf.h): value heads tiled, conv1d
// as an f32 [conv_dim][kernel] matrix, A_log as -exp(A_log). Reordering happens on the source
// (float) rows and columns, so any output type can follow.
template <typename Matrix>
void export_deltanet(Collector& col, const ModelConfig& c, const DeltaNetWeights& d,
                     const std::string& b, Matrix matrix) {
  const VHeadOrder order{c.linear_num_key_heads, c.linear_num_value_heads};
  const int64_t dv = c.linear_value_head_dim, kernel = c.linear_conv_kernel;
  const int64_t key_dim = int64_t(c.linear_num_key_heads) * c.linear_key_head_dim;
  std::vector<std::vector<uint8_t>> keep;
  auto rows = [&](const WeightMatrix& m, int64_t offset, int64_t per_head) {
    if (order.identity()) return m;
    keep.push_back(reorder_v_rows(static_cast<const uint8_t*>(m.data), m.rows, m.row_bytes, offset,
                                  per_head, order, true));
    WeightMatrix r = m;
    r.data = keep.back().data();
    return r;
  };
  matrix(b + "attn_qkv.weight", rows(d.in_proj_qkv, 2 * key_dim, dv));
  matrix(b + "attn_gate.weight", rows(d.in_proj_z, 0, dv));
  matrix(b + "ssm_beta.weight", rows(d.in_proj_b, 0, 1));
  matrix(b + "ssm_alpha.weight", rows(d.in_proj_a, 0, 1));
  WeightMatrix out = d.out_proj;
  if (!order.identity()) {
    keep.push_back(reorder_v_cols(out, dv, order, true, b + "ssm_out.weight"));
    out.data = keep.back().data();
  }
  matrix(b + "ssm_out.weight", out);
  std::vector<float> conv =
      order.identity() ? d.conv1d
                       : reorder_v_vec(d.conv1d, 2 * key_dim * kernel, dv * kernel, order, true);
  std::vector<uint8_t> conv_bytes(conv.size() * sizeof(float));
  std::memcpy(conv_bytes.data(), conv.data(), conv_bytes.size());
  const int64_t conv_dim = int64_t(conv.size()) / kernel;
  col.add(b + "ssm_conv1d.weight", WType::F32, {kernel, conv_dim}, std::move(conv_bytes));
  const std::vector<float>& a = d.ssm_a;
  col.add_vec(b + "ssm_dt.bias",
              order.identity() ? d.dt_bias : reorder_v_vec(d.dt_bias, 0, 1, order, true));
  col.add_vec(b + "ssm_a", order.identity() ? a : reorder_v_vec(a, 0, 1, order, true));
  col.add_vec(b + "ssm_norm.weight", d.norm);
}

}  // namespace

ExportStats export_gguf(const Model& model, FileType ft, const std::filesystem::path& out) {
  const ModelConfig& c = model.config();
  if (c.rope_scaling == RopeScaling::Llama3)
    fail(
        "GGUF export of llama3 rope scaling (llama.cpp writes it as a rope_freqs tensor) is not "
        "supported yet");
  if (!model.tokenizer())
    fail(model.path().string() + ": no tokenizer.json; a GGUF needs the vocabulary");
  const ModelWeights& W = model.weights();
  Collector col;
  write_config(col.w, c, ft, model.path().filename().string());
  write_gguf_tokenizer(col.w, model.tokenizer()->spec(), c.vocab);

  const bool tied = c.tie_embeddings;
  const bool permute = c.arch == Arch::Llama;
  auto matrix = [&](const std::string& name, const WeightMatrix& m, TensorRole role, int layer,
                    bool permuted = false) {
    const WType t = choose_wtype(ft, role, layer, c.n_layers, m.cols, tied);
    std::vector<uint8_t> data = convert_matrix(m, t);
    if (permuted) data = permute_rows(data, m.rows, wtype_row_bytes(t, m.cols), c.head_dim);
    col.add(name, t, {m.cols, m.rows}, std::move(data));
  };
  matrix("token_embd.weight", W.embed, TensorRole::TokenEmbd, 0);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = W.layers[size_t(l)];
    const std::string b = "blk." + std::to_string(l) + ".";
    col.add_vec(b + "attn_norm.weight", L.attn_norm);
    if (c.is_hybrid()) {
      col.add_vec(b + "post_attention_norm.weight", L.mlp_norm);
      if (L.kind == LayerKind::LinearAttention) {
        export_deltanet(col, c, L.delta, b, [&](const std::string& name, const WeightMatrix& m) {
          matrix(name, m, TensorRole::AttnOutput, l);
        });
      } else {
        matrix(b + "attn_q.weight", L.attn.wq, TensorRole::AttnQ, l);
        matrix(b + "attn_k.weight", L.attn.wk, TensorRole::AttnK, l);
        matrix(b + "attn_v.weight", L.attn.wv, TensorRole::AttnV, l);
        matrix(b + "attn_output.weight", L.attn.wo, TensorRole::AttnOutput, l);
        col.add_vec(b + "attn_q_norm.weight", L.attn.q_norm);
        col.add_vec(b + "attn_k_norm.weight", L.attn.k_norm);
      }
      matrix(b + "ffn_gate.weight", L.mlp.gate, TensorRole::FfnGate, l);
      matrix(b + "ffn_up.weight", L.mlp.up, TensorRole::FfnUp, l);
      matrix(b + "ffn_down.weight", L.mlp.down, TensorRole::FfnDown, l);
      continue;
    }
    matrix(b + "attn_q.weight", L.attn.wq, TensorRole::AttnQ, l, permute);
    matrix(b + "attn_k.weight", L.attn.wk, TensorRole::AttnK, l, permute);
    matrix(b + "attn_v.weight", L.attn.wv, TensorRole::AttnV, l);
    matrix(b + "attn_output.weight", L.attn.wo, TensorRole::AttnOutput, l);
    if (!L.attn.bq.empty()) {
      col.add_vec(b + "attn_q.bias", permute ? permute_vec(L.attn.bq, c.head_dim) : L.attn.bq);
      col.add_vec(b + "attn_k.bias", permute ? permute_vec(L.attn.bk, c.head_dim) : L.attn.bk);
      col.add_vec(b + "attn_v.bias", L.attn.bv);
    }
    if (!L.attn.bo.empty()) col.add_vec(b + "attn_output.bias", L.attn.bo);
    if (!L.attn.q_norm.empty()) {
      col.add_vec(b + "attn_q_norm.weight", L.attn.q_norm);
      col.add_vec(b + "attn_k_norm.weight", L.attn.k_norm);
    }
    col.add_vec(b + "ffn_norm.weight", L.mlp_norm);
    matrix(b + "ffn_gate.weight", L.mlp.gate, TensorRole::FfnGate, l);
    matrix(b + "ffn_up.weight", L.mlp.up, TensorRole::FfnUp, l);
    matrix(b + "ffn_down.weight", L.mlp.down, TensorRole::FfnDown, l);
    if (!L.mlp.b_gate.empty()) {
      col.add_vec(b + "ffn_gate.bias", L.mlp.b_gate);
      col.add_vec(b + "ffn_up.bias", L.mlp.b_up);
      col.add_vec(b + "ffn_down.bias", L.mlp.b_down);
    }
  }
  col.add_vec("output_norm.weight", W.final_norm);
  if (!tied) matrix("output.weight", W.lm_head, TensorRole::Output, 0);
  col.w.write(out);
  return col.stats;
}

ExportStats requantize_gguf(const std::filesystem::path& in, const std::filesystem::path& out,
                            FileType ft) {
  const GgufFile f = GgufFile::open(in);
  gguf_model_config(f);  // refuses architectures fak cannot run
  const int n_layers = int(f.get_u64(f.get_string("general.architecture") + ".block_count"));
  const bool tied = f.tensor("output.weight") == nullptr;
  Collector col;
  for (const GgufKv& kv : f.metadata())
    if (kv.key != "general.alignment") col.w.set(kv.key, kv.value);
  col.w.set_u32("general.file_type", uint32_t(ft));
  col.w.set_u32("general.quantization_version", 2);
  static const std::regex kBlock(R"(blk\.(\d+)\.(\w+)\.weight)");
  for (const GgufTensor& t : f.tensors()) {
    const std::optional<WType> src = wtype_from_ggml(t.ggml_type);
    // Vectors, the DeltaNet conv kernel (llama.cpp keeps it f32) and types fak cannot read are
    // copied as they are.
    if (t.dims.size() != 2 || !src || t.name.find(".ssm_conv1d.") != std::string::npos) {
      col.w.add_tensor(t.name, t.ggml_type, t.dims, {t.data, t.nbytes});
      col.stats.tensors++;
      col.stats.bytes += t.nbytes;
      continue;
    }
    TensorRole role = TensorRole::AttnOutput;
    int layer = 0;
    std::smatch m;
    if (t.name == "token_embd.weight") {
      role = TensorRole::TokenEmbd;
    } else if (t.name == "output.weight") {
      role = TensorRole::Output;
    } else if (std::regex_match(t.name, m, kBlock)) {
      layer = std::stoi(m[1]);
      const std::string kind = m[2];
      role = kind == "attn_q"     ? TensorRole::AttnQ
             : kind == "attn_k"   ? TensorRole::AttnK
             : kind == "attn_v"   ? TensorRole::AttnV
             : kind == "ffn_gate" ? TensorRole::FfnGate
             : kind == "ffn_up"   ? TensorRole::FfnUp
             : kind == "ffn_down" ? TensorRole::FfnDown
                                  : TensorRole::AttnOutput;
    }
    const WeightMatrix wm{*src, t.data, t.dims[1], t.dims[0], wtype_row_bytes(*src, t.dims[0])};
    const WType type = choose_wtype(ft, role, layer, n_layers, wm.cols, tied);
    col.add(t.name, type, t.dims, convert_matrix(wm, type));
  }
  col.w.write(out);
  return col.stats;
}

}  // namespace fak
