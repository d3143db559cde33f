// Hugging Face weights through the family's tensor table: each entry's tensor is found, its shape
// and dtype checked, and a view bound (matrices stay in the file, in their stored type) or its
// values read (vectors, widened to f32 once with the entry's transform).
#include "models/weights.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/tensor_table.h"

namespace fak {

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  TensorInfo t;
  t.shape = shape;
  return t.shape_string();
}

class Loader {
 public:
  Loader(const TensorStore& store, const ModelConfig& c, std::string prefix)
      : store_(store), c_(c), prefix_(std::move(prefix)) {
    // transformers before 4.52 saved a multimodal model's language model whole, head included,
    // under language_model. (language_model.model.layers..., language_model.lm_head.weight).
    if (prefix_ == "language_model.model.") root_prefix_ = "language_model.";
  }

  std::string full_name(const TensorDef& d, const std::string& name) const {
    return d.hf_root ? root_prefix_ + name : prefix_ + name;
  }
  bool has(const std::string& full) const { return store_.find(full) != nullptr; }

  // A listed tensor, found and of this shape (and now counted as used).
  const TensorInfo& shaped(const std::string& name, const std::vector<int64_t>& shape) {
    const TensorInfo* t = store_.find(name);
    if (!t) fail(store_.source().string() + ": missing tensor '" + name + "'");
    used_.insert(name);
    if (t->shape != shape)
      fail(t->file + ": tensor '" + name + "' has shape " + t->shape_string() + ", expected " +
           shape_text(shape) + " from config.json");
    return *t;
  }

  const TensorInfo& tensor(const std::string& name, const std::vector<int64_t>& shape) {
    const TensorInfo* t = &shaped(name, shape);
    if (t->dtype != DType::F32 && t->dtype != DType::BF16 && t->dtype != DType::F16)
      fail(t->file + ": tensor '" + name + "' has dtype " + std::string(dtype_name(t->dtype)) +
           " (supported: F32, BF16, F16)");
    return *t;
  }

  // Rows [row0, row0 + rows) of a tensor whose rows are `cols` wide.
  static WeightMatrix view(const TensorInfo& t, int64_t row0, int64_t rows, int64_t cols) {
    WeightMatrix m;
    m.type = t.dtype == DType::F32 ? WType::F32 : t.dtype == DType::BF16 ? WType::BF16 : WType::F16;
    m.rows = rows;
    m.cols = cols;
    m.row_bytes = wtype_row_bytes(m.type, cols);
    m.data = t.data + size_t(row0) * m.row_bytes;
    return m;
  }

  void load(const TensorDef& d) {
    switch (d.kind) {
      case TensorKind::Vector:
        load_vector(d);
        return;
      case TensorKind::Matrix: {
        const std::string name = full_name(d, d.hf);
        *d.matrix = view(tensor(name, {d.rows, d.cols}), 0, d.rows, d.cols);
        return;
      }
      case TensorKind::Experts:
        load_experts(d);
        return;
    }
  }

  // Tensors the table does not list (an extra layer, a misspelt name) mean the config and the
  // weights disagree: refuse rather than silently run a different model.
  size_t check_all_used() const {
    size_t skipped = 0;
    for (const TensorInfo* t : store_.all()) {
      if (used_.count(t->name)) continue;
      const std::string& n = t->name;
      if (n.find("rotary_emb.inv_freq") != std::string::npos) continue;
      // A multimodal checkpoint's vision tower and the MTP head sit beside the language model.
      if (n.rfind("mtp.", 0) == 0 || unread_nextn_layer(n) ||
          (prefix_ != "model." && n.rfind(prefix_, 0) != 0 &&
           n != root_prefix_ + "lm_head.weight")) {
        ++skipped;
        continue;
      }
      fail(t->file + ": unexpected tensor '" + n + "' " + t->shape_string() +
           " that config.json does not account for");
    }
    return skipped;
  }

  size_t bytes() const { return bytes_; }

 private:
  // model.layers.<k>.* with k one of the NextN blocks after the decoder's layers.
  bool unread_nextn_layer(const std::string& n) const {
    const std::string layers = prefix_ + "layers.";
    if (c_.unread_nextn_layers == 0 || n.rfind(layers, 0) != 0) return false;
    const char* digits = n.c_str() + layers.size();
    char* end = nullptr;
    const long k = std::strtol(digits, &end, 10);
    return end != digits && *end == '.' && k >= c_.n_layers &&
           k < int64_t(c_.n_layers) + c_.unread_nextn_layers;
  }

  void load_vector(const TensorDef& d) {
    const std::string name = full_name(d, d.hf);
    std::vector<int64_t> shape = {d.rows};
    if (d.cols > 1) shape = {d.rows, d.cols};
    if (d.hf_layout == HfLayout::Conv) shape = {d.rows, 1, d.cols};
    const bool interleaved =
        d.hf_layout == HfLayout::InterleavedEven || d.hf_layout == HfLayout::InterleavedOdd;
    if (interleaved) shape = {d.rows, 2 * d.cols};
    std::vector<float> v = read_f32(tensor(name, shape));
    if (interleaved) {  // every other column, from the first or the second
      const size_t parity = d.hf_layout == HfLayout::InterleavedOdd ? 1 : 0;
      for (size_t i = 0; i < size_t(d.rows * d.cols); ++i) v[i] = v[2 * i + parity];
      v.resize(size_t(d.rows * d.cols));
    }
    for (float& x : v) {
      if (d.hf_value == HfValue::PlusOne) x += 1.0f;
      if (d.hf_value == HfValue::NegExp) x = float(-std::exp(double(x)));
    }
    *d.vector = std::move(v);
  }

  void load_experts(const TensorDef& d) {
    std::string spelling = full_name(d, d.hf);
    HfLayout layout = d.hf_layout;
    const std::string first = layout == HfLayout::PerExpert ? expert_name(spelling, 0) : spelling;
    if (!has(first) && !d.hf_alt.empty()) {
      const std::string alt = full_name(d, d.hf_alt);
      const std::string alt_first =
          d.hf_alt_layout == HfLayout::PerExpert ? expert_name(alt, 0) : alt;
      if (has(alt_first)) {
        spelling = alt;
        layout = d.hf_alt_layout;
      }
    }
    std::vector<WeightMatrix>& out = *d.experts;
    const int64_t E = d.n_experts;
    // OpenAI's gpt-oss checkpoints keep the experts in MXFP4 (<name>_blocks and <name>_scales,
    // [E, out, in]): run as stored.
    if (!has(spelling) && has(spelling + "_blocks") &&
        (layout == HfLayout::StackedTransposed || layout == HfLayout::InterleavedEven ||
         layout == HfLayout::InterleavedOdd))
      return load_mxfp4_experts(d, spelling, layout);
    switch (layout) {
      case HfLayout::PerExpert:
        for (int64_t e = 0; e < E; ++e)
          out[size_t(e)] =
              view(tensor(expert_name(spelling, e), {d.rows, d.cols}), 0, d.rows, d.cols);
        return;
      case HfLayout::Stacked: {
        const TensorInfo& t = tensor(spelling, {E, d.rows, d.cols});
        for (int64_t e = 0; e < E; ++e) out[size_t(e)] = view(t, e * d.rows, d.rows, d.cols);
        return;
      }
      case HfLayout::FusedFirst:
      case HfLayout::FusedSecond: {
        // Each expert's rows: gate then up ([E, 2 x rows, cols]). A fused tensor serves two
        // entries; its shape is checked by each.
        const TensorInfo& t = tensor(spelling, {E, 2 * d.rows, d.cols});
        const int64_t half = layout == HfLayout::FusedFirst ? 0 : d.rows;
        for (int64_t e = 0; e < E; ++e)
          out[size_t(e)] = view(t, e * 2 * d.rows + half, d.rows, d.cols);
        return;
      }
      case HfLayout::StackedTransposed:
      case HfLayout::InterleavedEven:
      case HfLayout::InterleavedOdd: {
        // Stored [cols, rows] per expert (x @ W); gate and up interleaved by column in one tensor.
        // Laid out anew, [rows, cols], in the file's type.
        const int64_t stride = layout == HfLayout::StackedTransposed ? 1 : 2;
        const int64_t parity = layout == HfLayout::InterleavedOdd ? 1 : 0;
        const TensorInfo& t = tensor(spelling, {E, d.cols, stride * d.rows});
        const size_t elem = dtype_size(t.dtype);
        for (int64_t e = 0; e < E; ++e) {
          std::vector<uint8_t> bytes(size_t(d.rows * d.cols) * elem);
          const uint8_t* src = t.data + size_t(e * d.cols * stride * d.rows) * elem;
          for (int64_t c = 0; c < d.cols; ++c)
            for (int64_t r = 0; r < d.rows; ++r)
              std::memcpy(&bytes[size_t(r * d.cols + c) * elem],
                          src + size_t(c * stride * d.rows + stride * r + parity) * elem, elem);
          made_.push_back(std::move(bytes));
          WeightMatrix m = view(t, 0, d.rows, d.cols);
          m.data = made_.back().data();
          out[size_t(e)] = m;
        }
        return;
      }
      default:
        fail("tensor table: '" + spelling + "' has no expert layout");
    }
  }

 public:
  // The matrices laid out anew (load_experts), for ModelWeights::made_at_load.
  std::vector<std::vector<uint8_t>> take_made() { return std::move(made_); }

 private:
  // MXFP4 experts as transformers' Mxfp4GptOssExperts holds them: blocks [E, R, in / 32, 16] and
  // E8M0 scales [E, R, in / 32] (uint8), where R is the output rows (gate and up interleaved by
  // row in gate_up_proj) and byte j of a block holds elements 2j (low nibble) and 2j + 1 (high).
  // Each expert's rows are laid out as ggml's MXFP4 (byte j: elements j and j + 16; the same
  // codes and exponent: 2^(e - 127) * fp4 = 2^(e - 128) * 2 fp4).
  void load_mxfp4_experts(const TensorDef& d, const std::string& name, HfLayout layout) {
    const int64_t E = d.n_experts, G = d.cols / 32;
    if (d.cols % 32 != 0)
      fail(store_.source().string() + ": '" + name + "_blocks': " + std::to_string(d.cols) +
           " columns are not whole MXFP4 blocks of 32");
    const int64_t stride = layout == HfLayout::StackedTransposed ? 1 : 2;
    const int64_t parity = layout == HfLayout::InterleavedOdd ? 1 : 0;
    const TensorInfo& blocks = raw_tensor(name + "_blocks", {E, stride * d.rows, G, 16});
    const TensorInfo& scales = raw_tensor(name + "_scales", {E, stride * d.rows, G});
    std::vector<WeightMatrix>& out = *d.experts;
    const size_t row_bytes = wtype_row_bytes(WType::MXFP4, d.cols);
    for (int64_t e = 0; e < E; ++e) {
      std::vector<uint8_t> bytes(row_bytes * size_t(d.rows));
      for (int64_t r = 0; r < d.rows; ++r) {
        const int64_t src = e * stride * d.rows + stride * r + parity;  // [E][R] row index
        for (int64_t g = 0; g < G; ++g) {
          const uint8_t* b = blocks.data + size_t((src * G + g) * 16);
          uint8_t code[32];
          for (int j = 0; j < 16; ++j) {
            code[2 * j] = b[j] & 0x0F;
            code[2 * j + 1] = b[j] >> 4;
          }
          uint8_t* block = &bytes[size_t(r) * row_bytes + size_t(g) * 17];
          block[0] = scales.data[size_t(src * G + g)];
          for (int j = 0; j < 16; ++j) block[1 + j] = uint8_t(code[j] | (code[j + 16] << 4));
        }
      }
      made_.push_back(std::move(bytes));
      out[size_t(e)] = WeightMatrix{WType::MXFP4, made_.back().data(), d.rows, d.cols, row_bytes};
    }
  }

  // A uint8 tensor (MXFP4 blocks and scales), its shape checked.
  const TensorInfo& raw_tensor(const std::string& name, const std::vector<int64_t>& shape) {
    const TensorInfo* t = &shaped(name, shape);
    if (t->dtype != DType::U8)
      fail(t->file + ": tensor '" + name + "' has dtype " + std::string(dtype_name(t->dtype)) +
           " (MXFP4 blocks and scales are U8)");
    return *t;
  }

  static std::string expert_name(const std::string& pattern, int64_t e) {
    std::string n = pattern;
    const size_t at = n.find("{e}");
    check(at != std::string::npos, "tensor table: '" + pattern + "' names no expert");
    return n.replace(at, 3, std::to_string(e));
  }

  const TensorStore& store_;
  const ModelConfig& c_;
  std::string prefix_;
  std::string root_prefix_;
  size_t bytes_ = 0;
  std::set<std::string> used_;
  std::vector<std::vector<uint8_t>> made_;
};

}  // namespace

ModelWeights load_hf_weights(const TensorStore& store, const ModelConfig& c,
                             const std::string& prefix, size_t* skipped) {
  Loader ld(store, c, prefix);
  ModelWeights w;
  shape_weights(c, w);
  // The files must hold every layer config.json declares: checked on the last one before the
  // rest is read, so a config claiming thousands of layers is refused at once.
  const std::vector<TensorDef> last = tensor_table_part(c, w, c.n_layers - 1);
  if (!last.empty()) {
    const std::string name = ld.full_name(last.front(), last.front().hf);
    if (!ld.has(name))
      fail(store.source().string() + ": missing tensor '" + name +
           "' (config.json says num_hidden_layers = " + std::to_string(c.n_layers) + ")");
  }
  for (int l = -1; l < table_parts_end(c); ++l)
    for (const TensorDef& d : tensor_table_part(c, w, l)) {
      if (d.layer < 0 && d.hf_root && d.role == "output" && !ld.has(ld.full_name(d, d.hf)))
        fail(store.source().string() + ": missing tensor '" + ld.full_name(d, d.hf) +
             "' (config says tie_word_embeddings is false)");
      ld.load(d);
    }
  if (c.tie_embeddings) w.lm_head = w.embed;
  w.bytes = matrix_bytes(c, w);
  w.made_at_load = std::make_shared<std::vector<std::vector<uint8_t>>>(ld.take_made());
  const size_t n_skipped = ld.check_all_used();
  if (skipped) *skipped = n_skipped;
  return w;
}

void pack_weight_panels(const ModelConfig& c, ModelWeights& w) {
  for_each_matrix(c, w, [&](WeightMatrix& m, const TensorDef&) {
    // An untied embedding is only looked up, a row per token: as stored, a row is one contiguous
    // read, where packed it is scattered over its 16-row group's panels and put back together
    // block by block (GLM-4.5-Air's 4096-wide Q8_0 rows: 50 us a token in a pp512, 1.7% of it).
    if (&m == &w.embed && !c.tie_embeddings) return;
    // note: the caller's promise (weights.h) is what makes writing through this pointer sound.
    if (m.data) pack_weight_panels(m, static_cast<uint8_t*>(const_cast<void*>(m.data)));
  });
  // A tied head is the embedding: the same (now packed) view.
  if (c.tie_embeddings) w.lm_head = w.embed;
}

}  // namespace fak
