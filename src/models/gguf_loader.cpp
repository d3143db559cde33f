// GGUF model loading. llama.cpp's names: token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v,
// attn_output, attn_q_norm, attn_k_norm, ffn_norm, ffn_gate, ffn_up, ffn_down}, output_norm,
// output (absent = tied to token_embd). ggml dims are ne0 first, so a [rows, cols] matrix is
// stored with dims {cols, rows}. qwen35 (the Qwen3.5 hybrid): post_attention_norm instead of
// ffn_norm, attn_q with the output gate, and on DeltaNet layers attn_qkv, attn_gate (z),
// ssm_{conv1d, dt.bias, a, beta, alpha, norm, out} in llama.cpp's conventions (qwen35_gguf.h).
#include "models/gguf_loader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <set>
#include <string>

#include "core/anon_memory.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/hash.h"
#include "io/ggml_type.h"
#include "models/gguf_tokenizer.h"
#include "models/quant_policy.h"
#include "models/qwen35_gguf.h"
#include "ops/quant/quant.h"

namespace fak {

std::optional<WType> wtype_from_ggml(uint32_t id) {
  switch (GgmlType(id)) {
    case GgmlType::F32:
      return WType::F32;
    case GgmlType::F16:
      return WType::F16;
    case GgmlType::BF16:
      return WType::BF16;
    default:
      break;
  }
  if (auto q = quant_type_from_ggml(id)) return wtype_from_quant(*q);
  return std::nullopt;
}

uint32_t ggml_type_of(WType t) {
  switch (t) {
    case WType::F32:
      return uint32_t(GgmlType::F32);
    case WType::F16:
      return uint32_t(GgmlType::F16);
    case WType::BF16:
      return uint32_t(GgmlType::BF16);
    default:
      return uint32_t(*wtype_quant(t));  // QuantType values are the ggml ids
  }
}

int64_t llama_unpermuted_row(int64_t g, int hd) {
  const int64_t head = g / hd, j = g % hd;
  return head * hd + (j % 2) * (hd / 2) + j / 2;
}

int64_t llama_permuted_row(int64_t h, int hd) {
  const int64_t head = h / hd, j = h % hd;
  return head * hd + 2 * (j % (hd / 2)) + j / (hd / 2);
}

namespace {

// The whole file read into anonymous memory: no page faults into the page cache during decode,
// and transparent huge pages when the kernel grants them.
std::shared_ptr<AnonMemory> read_anonymous(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open " + path.string() + ": " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    fail("cannot stat " + path.string());
  }
  std::shared_ptr<AnonMemory> copy;
  try {
    copy = std::make_shared<AnonMemory>(size_t(st.st_size), path.c_str());
  } catch (...) {
    ::close(fd);
    throw;
  }
  // Read in chunks on every thread: faulting in (zeroing, and with huge pages sometimes
  // compacting) the destination costs as much as the copy, and both scale with threads.
  constexpr size_t kChunk = size_t(32) << 20;
  const int64_t n_chunks = int64_t((copy->size() + kChunk - 1) / kChunk);
  uint8_t* dst = copy->data();
  std::string error;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t c = 0; c < n_chunks; ++c) {
    size_t done = size_t(c) * kChunk;
    const size_t end = std::min(copy->size(), done + kChunk);
    while (done < end) {
      const ssize_t n = ::pread(fd, dst + done, end - done, off_t(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
#pragma omp critical(fak_read_anonymous)
        error = n == 0 ? "truncated" : std::strerror(errno);
        break;
      }
      done += size_t(n);
    }
  }
  if (!error.empty()) {
    ::close(fd);
    fail("cannot read " + path.string() + ": " + error);
  }
  ::close(fd);
  return copy;
}

// Everything the model owns: the parsed file (and its bytes) plus rows repacked at load.
struct Storage {
  std::shared_ptr<AnonMemory> anon;
  std::unique_ptr<GgufFile> file;
  std::vector<std::vector<uint8_t>> repacked;
};

class Loader {
 public:
  Loader(const GgufFile& f, const ModelConfig& c, Storage& s) : f_(f), c_(c), s_(s) {}

  const GgufTensor& tensor(const std::string& name, const std::vector<int64_t>& dims) {
    const GgufTensor* t = f_.tensor(name);
    if (!t) fail(f_.name() + ": missing tensor '" + name + "'");
    used_.insert(name);
    if (t->dims != dims)
      fail(f_.name() + ": tensor '" + name + "' has dims " + dims_str(t->dims) + ", expected " +
           dims_str(dims) + " from the metadata");
    return *t;
  }

  WeightMatrix matrix(const std::string& name, int64_t rows, int64_t cols) {
    const GgufTensor& t = tensor(name, {cols, rows});
    const std::optional<WType> type = wtype_from_ggml(t.ggml_type);
    if (!type) {
      const GgmlTypeInfo* info = ggml_type_info(t.ggml_type);
      fail(f_.name() + ": tensor '" + name + "' has type " +
           (info ? std::string(info->name) : std::to_string(t.ggml_type)) +
           ", which fak cannot compute with (supported: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 "
           "q4_K q5_K q6_K)");
    }
    WeightMatrix m{*type, t.data, rows, cols, wtype_row_bytes(*type, cols)};
    bytes_ += m.bytes();
    return m;
  }

  // llama q/k: rows back into HF's rotate-half order (see llama_unpermuted_row).
  WeightMatrix unpermuted(WeightMatrix m) {
    std::vector<uint8_t> rows(m.bytes());
    for (int64_t r = 0; r < m.rows; ++r)
      std::memcpy(rows.data() + size_t(llama_unpermuted_row(r, c_.head_dim)) * m.row_bytes,
                  m.row(r), m.row_bytes);
    return repacked(m, std::move(rows));
  }

  std::vector<float> vec(const std::string& name, int64_t n) {
    const GgufTensor& t = tensor(name, {n});
    std::vector<float> v(static_cast<size_t>(n));
    const std::optional<WType> type = wtype_from_ggml(t.ggml_type);
    if (!type || (wtype_quant(*type) && n % wtype_block(*type) != 0))
      fail(f_.name() + ": tensor '" + name + "' has an unsupported type for a vector");
    WeightMatrix m{*type, t.data, 1, n, wtype_row_bytes(*type, n)};
    dequantize_row(m, 0, v.data());
    return v;
  }

  // m with its bytes replaced by `bytes` of type t (reordered rows or columns). A file read into
  // memory of our own takes a result of the same type over its stored bytes, so the model holds
  // one copy of the matrix, not two (the qwen35 DeltaNet matrices of a 27B-shape layer are 120
  // MB); a mapped file is read-only, and the model keeps the copy.
  WeightMatrix repacked(WeightMatrix m, std::vector<uint8_t> bytes, std::optional<WType> t = {}) {
    if (s_.anon && (!t || *t == m.type)) {
      check(bytes.size() == m.bytes(), "repacked: wrong size");
      std::memcpy(const_cast<void*>(m.data), bytes.data(), bytes.size());
      return m;
    }
    bytes_ -= m.bytes();
    if (t) m.type = *t;
    m.row_bytes = wtype_row_bytes(m.type, m.cols);
    check(bytes.size() == m.bytes(), "repacked: wrong size");
    s_.repacked.push_back(std::move(bytes));
    m.data = s_.repacked.back().data();
    bytes_ += m.bytes();
    return m;
  }

  std::vector<float> unpermuted_vec(std::vector<float> v) {
    std::vector<float> out(v.size());
    for (size_t r = 0; r < v.size(); ++r)
      out[size_t(llama_unpermuted_row(int64_t(r), c_.head_dim))] = v[r];
    return out;
  }

  bool has(const std::string& name) const { return f_.tensor(name) != nullptr; }
  size_t bytes() const { return bytes_; }
  const std::string& file_name() const { return f_.name(); }

  void check_all_used() const {
    for (const GgufTensor& t : f_.tensors()) {
      if (used_.count(t.name) || t.name == "rope_freqs.weight") continue;
      // qwen35 multi-token-prediction blocks sit past the decoder's layers: not used to decode.
      if (c_.is_hybrid() && t.name.rfind("blk.", 0) == 0 &&
          std::atoi(t.name.c_str() + 4) >= c_.n_layers)
        continue;
      fail(f_.name() + ": unexpected tensor '" + t.name + "' " + dims_str(t.dims) +
           " that the metadata does not account for");
    }
  }

 private:
  static std::string dims_str(const std::vector<int64_t>& d) {
    std::string s = "[";
    for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
    return s + "]";
  }

  const GgufFile& f_;
  const ModelConfig& c_;
  Storage& s_;
  size_t bytes_ = 0;
  std::set<std::string> used_;
};

// A DeltaNet layer in llama.cpp's qwen35 layout, back into HF's conventions (see qwen35_gguf.h).
void load_deltanet(Loader& ld, const ModelConfig& c, const std::string& b, DeltaNetWeights& d) {
  const VHeadOrder order{c.linear_num_key_heads, c.linear_num_value_heads};
  const int64_t nv = c.linear_num_value_heads, dv = c.linear_value_head_dim;
  const int64_t key_dim = int64_t(c.linear_num_key_heads) * c.linear_key_head_dim;
  const int64_t value_dim = nv * dv, conv_dim = 2 * key_dim + value_dim;
  auto rows = [&](WeightMatrix m, int64_t offset, int64_t per_head) {
    if (order.identity()) return m;
    return ld.repacked(m, reorder_v_rows(static_cast<const uint8_t*>(m.data), m.rows, m.row_bytes,
                                         offset, per_head, order, false));
  };
  d.in_proj_qkv = rows(ld.matrix(b + "attn_qkv.weight", conv_dim, c.dim), 2 * key_dim, dv);
  d.in_proj_z = rows(ld.matrix(b + "attn_gate.weight", value_dim, c.dim), 0, dv);
  d.in_proj_b = rows(ld.matrix(b + "ssm_beta.weight", nv, c.dim), 0, 1);
  d.in_proj_a = rows(ld.matrix(b + "ssm_alpha.weight", nv, c.dim), 0, 1);
  d.out_proj = ld.matrix(b + "ssm_out.weight", c.dim, value_dim);
  if (!order.identity()) {
    const std::string name = b + "ssm_out.weight";
    if (dv % wtype_block(d.out_proj.type) == 0) {
      d.out_proj = ld.repacked(d.out_proj, reorder_v_cols(d.out_proj, dv, order, false, name));
    } else {
      // Blocks wider than a value head (K-quants on 128-wide heads) cannot be moved whole: widen,
      // reorder, and keep it as Q8_0 (F32 where heads are not 32-aligned). note: so such a
      // tensor is computed at Q8_0's precision, not the file's type.
      std::vector<uint8_t> wide = convert_matrix(d.out_proj, WType::F32);
      WeightMatrix f = d.out_proj;
      f.type = WType::F32;
      f.row_bytes = wtype_row_bytes(WType::F32, f.cols);
      f.data = wide.data();
      std::vector<uint8_t> re = reorder_v_cols(f, dv, order, false, name);
      f.data = re.data();
      const WType t = dv % 32 == 0 ? WType::Q8_0 : WType::F32;
      d.out_proj =
          ld.repacked(d.out_proj, t == WType::F32 ? std::move(re) : convert_matrix(f, t), t);
    }
  }
  // conv1d: [conv_dim][kernel], dims {kernel, conv_dim}.
  const WeightMatrix conv = ld.matrix(b + "ssm_conv1d.weight", conv_dim, c.linear_conv_kernel);
  d.conv1d.resize(size_t(conv_dim * c.linear_conv_kernel));
  for (int64_t r = 0; r < conv_dim; ++r)
    dequantize_row(conv, r, &d.conv1d[size_t(r * c.linear_conv_kernel)]);
  if (!order.identity())
    d.conv1d = reorder_v_vec(d.conv1d, 2 * key_dim * c.linear_conv_kernel,
                             dv * c.linear_conv_kernel, order, false);
  d.dt_bias = ld.vec(b + "ssm_dt.bias", nv);
  // ssm_a = -exp(A_log), kept as stored (fak's weights hold the same form).
  d.ssm_a = ld.vec(b + "ssm_a", nv);
  for (float x : d.ssm_a)
    if (!(x < 0)) fail(ld.file_name() + ": " + b + "ssm_a must be negative (it is -exp(A_log))");
  if (!order.identity()) {
    d.dt_bias = reorder_v_vec(d.dt_bias, 0, 1, order, false);
    d.ssm_a = reorder_v_vec(d.ssm_a, 0, 1, order, false);
  }
  d.norm = ld.vec(b + "ssm_norm.weight", dv);
}

}  // namespace

ModelConfig gguf_model_config(const GgufFile& f) {
  const std::string arch = f.get_string("general.architecture");
  ModelConfig c;
  c.model_type = arch;
  if (arch == "llama") {
    c.arch = Arch::Llama;
  } else if (arch == "qwen2") {
    c.arch = Arch::Qwen2;
  } else if (arch == "qwen3") {
    c.arch = Arch::Qwen3;
  } else if (arch == "qwen35") {
    c.arch = Arch::Qwen35;
  } else {
    fail(f.name() + ": general.architecture '" + arch +
         "' is not supported (supported: llama, qwen2, qwen3, qwen35)");
  }
  const std::string p = arch + ".";
  // A positive integer of at most `max` (config.h's limits), refused before anything it sizes
  // is allocated.
  auto positive = [&](const std::string& key, int max = kMaxWidth) {
    const uint64_t v = f.get_u64(key);
    if (v == 0 || v > uint64_t(max))
      fail(f.name() + ": " + key + " must be a positive integer (at most " + std::to_string(max) +
           "), got " + std::to_string(v));
    return int(v);
  };
  // note: written so that NaN fails `ok`.
  auto require_number = [&](bool ok, const std::string& key, const char* rule, double v) {
    if (!ok) fail(f.name() + ": " + key + " must be " + rule + ", got " + number_text(v));
  };
  c.dim = positive(p + "embedding_length");
  c.hidden_dim = positive(p + "feed_forward_length");
  c.n_layers = positive(p + "block_count", kMaxLayers);
  c.n_heads = positive(p + "attention.head_count");
  c.n_kv_heads =
      f.find(p + "attention.head_count_kv") ? positive(p + "attention.head_count_kv") : c.n_heads;
  if (!f.find(p + "attention.key_length") && c.dim < c.n_heads)
    fail(f.name() + ": " + p + "attention.head_count (" + std::to_string(c.n_heads) +
         ") exceeds embedding_length (" + std::to_string(c.dim) + ") and there is no key_length");
  c.head_dim =
      f.find(p + "attention.key_length") ? positive(p + "attention.key_length") : c.dim / c.n_heads;
  if (f.find(p + "attention.value_length") && positive(p + "attention.value_length") != c.head_dim)
    fail(f.name() + ": attention.value_length differs from key_length (not supported)");
  if (c.n_heads % c.n_kv_heads != 0)
    fail(f.name() + ": attention.head_count is not a multiple of attention.head_count_kv");
  if (c.head_dim % 2 != 0) fail(f.name() + ": attention.key_length must be even");
  c.max_seq_len = f.find(p + "context_length") ? positive(p + "context_length", kMaxSeqLen) : 4096;
  c.rms_eps = f.get_f32_or(p + "attention.layer_norm_rms_epsilon", 1e-6f);
  // Added under the square root of a mean square: 0 divides by zero on a zero row, >= 1 swamps it.
  require_number(c.rms_eps > 0 && c.rms_eps < 1, p + "attention.layer_norm_rms_epsilon",
                 "> 0 and < 1", c.rms_eps);
  c.rope_theta = f.get_f32_or(p + "rope.freq_base", 10000.0f);
  require_number(std::isfinite(c.rope_theta) && c.rope_theta > 0, p + "rope.freq_base",
                 "finite and > 0", c.rope_theta);
  c.rotary_dim =
      f.find(p + "rope.dimension_count") ? positive(p + "rope.dimension_count") : c.head_dim;
  if (c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0)
    fail(f.name() + ": rope.dimension_count must be even and at most key_length");
  std::string scaling = "none";
  if (f.find(p + "rope.scaling.type")) scaling = f.get_string(p + "rope.scaling.type");
  std::string factor_key;
  if (scaling == "linear") {
    c.rope_scaling = RopeScaling::Linear;
    factor_key = p + "rope.scaling.factor";
  } else if (scaling != "none") {
    fail(f.name() + ": rope.scaling.type '" + scaling + "' is not supported (none, linear)");
  } else if (f.find(p + "rope.scale_linear")) {  // older files
    c.rope_scaling = RopeScaling::Linear;
    factor_key = p + "rope.scale_linear";
  }
  if (!factor_key.empty()) {
    c.rope_factor = f.get_f32(factor_key);
    // Every frequency is divided by it.
    require_number(std::isfinite(c.rope_factor) && c.rope_factor > 0, factor_key, "finite and > 0",
                   c.rope_factor);
  }
  if (f.tensor("rope_freqs.weight"))
    fail(f.name() +
         ": per-frequency rope factors (rope_freqs, Llama-3.1 style scaling) are not "
         "supported yet");

  const GgufTensor* embd = f.tensor("token_embd.weight");
  if (!embd || embd->dims.size() != 2) fail(f.name() + ": missing 2-D tensor 'token_embd.weight'");
  if (embd->dims[1] <= 0 || embd->dims[1] > kMaxWidth)
    fail(f.name() + ": tensor 'token_embd.weight' has " + std::to_string(embd->dims[1]) +
         " rows; the vocabulary must be 1 to " + std::to_string(kMaxWidth) + " tokens");
  c.vocab = int(embd->dims[1]);
  c.tie_embeddings = f.tensor("output.weight") == nullptr;
  // Any one of a group of biases means the model has them all: a missing one is then named as
  // missing, rather than its siblings reported as unexpected.
  auto any = [&f](std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (f.tensor(n)) return true;
    return false;
  };
  c.qkv_bias = any({"blk.0.attn_q.bias", "blk.0.attn_k.bias", "blk.0.attn_v.bias"});
  c.attn_output_bias = any({"blk.0.attn_output.bias"});
  c.mlp_bias = any({"blk.0.ffn_gate.bias", "blk.0.ffn_up.bias", "blk.0.ffn_down.bias"});
  // qwen3 always has q/k norms: the loader then names whichever is missing.
  c.qk_norm =
      c.arch == Arch::Qwen3 || any({"blk.0.attn_q_norm.weight", "blk.0.attn_k_norm.weight"});
  // block_count includes the qwen35 multi-token-prediction (NextN) blocks after the decoder.
  if (c.arch == Arch::Qwen35 && f.find(p + "nextn_predict_layers")) {
    const uint64_t nextn = f.get_u64(p + "nextn_predict_layers");
    if (nextn >= uint64_t(c.n_layers))
      fail(f.name() + ": " + p + "nextn_predict_layers must be below block_count");
    c.n_layers -= int(nextn);
  }
  // The file must hold every layer it declares: checked on the last one before anything per
  // layer is built, so a small file claiming thousands of layers is refused at once.
  const std::string last_norm = "blk." + std::to_string(c.n_layers - 1) + ".attn_norm.weight";
  if (!f.tensor(last_norm))
    fail(f.name() + ": missing tensor '" + last_norm + "' (" + p + "block_count says " +
         std::to_string(c.n_layers) + " layers)");
  c.layer_kinds.assign(size_t(c.n_layers), LayerKind::FullAttention);
  if (c.arch == Arch::Qwen35) {
    c.qk_norm = true;
    c.attn_output_gate = true;
    c.norm_plus_one = true;  // the family's convention; the file already holds 1 + w
    c.linear_conv_kernel = positive(p + "ssm.conv_kernel");
    c.linear_key_head_dim = positive(p + "ssm.state_size");
    c.linear_num_key_heads = positive(p + "ssm.group_count");
    c.linear_num_value_heads = positive(p + "ssm.time_step_rank");
    const int inner = positive(p + "ssm.inner_size");
    if (inner % c.linear_num_value_heads != 0 ||
        c.linear_num_value_heads % c.linear_num_key_heads != 0)
      fail(f.name() +
           ": ssm.inner_size must be a multiple of ssm.time_step_rank, and that of "
           "ssm.group_count");
    c.linear_value_head_dim = inner / c.linear_num_value_heads;
    // Which layers are recurrent: an explicit per-layer list, else every layer but each
    // full_attention_interval-th (llama.cpp's default interval is 4).
    if (const GgufValue* rec = f.find(p + "attention.recurrent_layers")) {
      if (rec->type != GgufType::ARRAY || rec->array.size() < size_t(c.n_layers))
        fail(f.name() + ": " + p + "attention.recurrent_layers must list every layer");
      for (int i = 0; i < c.n_layers; ++i)
        if (rec->array.u64(size_t(i)) != 0) c.layer_kinds[size_t(i)] = LayerKind::LinearAttention;
    } else {
      const int interval = f.find(p + "full_attention_interval")
                               ? positive(p + "full_attention_interval", kMaxLayers)
                               : 4;
      for (int i = 0; i < c.n_layers; ++i)
        if ((i + 1) % interval != 0) c.layer_kinds[size_t(i)] = LayerKind::LinearAttention;
    }
  }

  check_derived_sizes(c, f.name());
  // bos/eos ids must name a token of the file: of its token list when it has one (llama.cpp's
  // n_vocab; in a real GGUF the embedding has exactly as many rows), else of the embedding. An id
  // past the embedding's rows is then harmless: it is never sampled, and a prompt holding it is
  // refused by Session::append.
  const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  const int64_t vocab =
      tokens && tokens->type == GgufType::ARRAY ? int64_t(tokens->array.size()) : int64_t(c.vocab);
  auto token_id = [&](const char* key) {
    const int64_t id = f.get_i64(key);
    if (id < 0 || id >= vocab)
      fail(f.name() + ": " + key + " " + std::to_string(id) + " is outside the vocabulary (" +
           std::to_string(vocab) + " tokens)");
    return int32_t(id);
  };
  if (f.find("tokenizer.ggml.bos_token_id")) c.bos_id = token_id("tokenizer.ggml.bos_token_id");
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"})
    if (f.find(key)) c.eos_ids.push_back(token_id(key));
  return c;
}

GgufModel load_gguf_model(const std::filesystem::path& path, bool use_mmap, bool load_tokenizer,
                          bool pack_panels) {
  auto storage = std::make_shared<Storage>();
  GgufModel out;
  if (use_mmap) {
    storage->file = std::make_unique<GgufFile>(GgufFile::open(path));
    out.memory = "mmap";
  } else {
    storage->anon = read_anonymous(path);
    storage->file = std::make_unique<GgufFile>(
        GgufFile::from_memory({storage->anon->data(), storage->anon->size()}, path.string()));
    out.memory = "anonymous";
  }
  const GgufFile& f = *storage->file;
  // The identity hashes the bytes as stored, before loading rewrites any in memory of our own
  // (reordered rows, packed panels), so a session file moves between a mapped and a read load.
  Fnv1a h;
  h.update(path.filename().string());
  for (const GgufTensor& t : f.tensors()) {
    h.update(t.name);
    h.update(std::to_string(t.ggml_type));
    for (int64_t d : t.dims) h.update(std::to_string(d));
    h.update(t.data, std::min<size_t>(t.nbytes, 256));
    if (t.nbytes > 256) h.update(t.data + t.nbytes - 256, 256);
  }
  out.identity = h.hex();
  ModelConfig c = gguf_model_config(f);
  Loader ld(f, c, *storage);
  ModelWeights& w = out.weights;
  w.embed = ld.matrix("token_embd.weight", c.vocab, c.dim);
  w.final_norm = ld.vec("output_norm.weight", c.dim);
  w.lm_head = c.tie_embeddings ? w.embed : ld.matrix("output.weight", c.vocab, c.dim);
  const bool permuted = c.arch == Arch::Llama;  // qwen2/qwen3 use NEOX rope: rows as in HF
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    LayerWeights L;
    L.kind = c.layer_kinds[size_t(i)];
    L.attn_norm = ld.vec(b + "attn_norm.weight", c.dim);
    L.mlp_norm =
        ld.vec(b + (c.is_hybrid() ? "post_attention_norm.weight" : "ffn_norm.weight"), c.dim);
    if (L.kind == LayerKind::LinearAttention) {
      load_deltanet(ld, c, b, L.delta);
    } else {
      AttentionWeights& A = L.attn;
      A.wq =
          ld.matrix(b + "attn_q.weight", int64_t(c.q_dim()) * (c.attn_output_gate ? 2 : 1), c.dim);
      A.wk = ld.matrix(b + "attn_k.weight", c.kv_dim(), c.dim);
      A.wv = ld.matrix(b + "attn_v.weight", c.kv_dim(), c.dim);
      A.wo = ld.matrix(b + "attn_output.weight", c.dim, c.q_dim());
      if (c.qkv_bias) {
        A.bq = ld.vec(b + "attn_q.bias", c.q_dim());
        A.bk = ld.vec(b + "attn_k.bias", c.kv_dim());
        A.bv = ld.vec(b + "attn_v.bias", c.kv_dim());
      }
      if (c.attn_output_bias) A.bo = ld.vec(b + "attn_output.bias", c.dim);
      if (c.qk_norm) {
        A.q_norm = ld.vec(b + "attn_q_norm.weight", c.head_dim);
        A.k_norm = ld.vec(b + "attn_k_norm.weight", c.head_dim);
      }
      if (permuted) {
        A.wq = ld.unpermuted(A.wq);
        A.wk = ld.unpermuted(A.wk);
        if (!A.bq.empty()) A.bq = ld.unpermuted_vec(std::move(A.bq));
        if (!A.bk.empty()) A.bk = ld.unpermuted_vec(std::move(A.bk));
      }
    }
    MlpWeights& M = L.mlp;
    M.gate = ld.matrix(b + "ffn_gate.weight", c.hidden_dim, c.dim);
    M.up = ld.matrix(b + "ffn_up.weight", c.hidden_dim, c.dim);
    M.down = ld.matrix(b + "ffn_down.weight", c.dim, c.hidden_dim);
    if (c.mlp_bias) {
      M.b_gate = ld.vec(b + "ffn_gate.bias", c.hidden_dim);
      M.b_up = ld.vec(b + "ffn_up.bias", c.hidden_dim);
      M.b_down = ld.vec(b + "ffn_down.bias", c.dim);
    }
    w.layers.push_back(std::move(L));
  }
  w.bytes = ld.bytes();
  ld.check_all_used();

  // Read into memory of our own (not mapped): quantised matrices become the matmul kernel's
  // panels in place, once, after the identity has hashed the bytes as stored. A tied embedding is
  // packed once for both its uses (lookups read panels through dequantize_row).
  if (!use_mmap && pack_panels) pack_weight_panels(w);
  if (load_tokenizer && f.find("tokenizer.ggml.model")) {
    out.tokenizer = tokenizer_spec_from_gguf(f);
    if (c.bos_id && !out.tokenizer->bos_id) out.tokenizer->bos_id = c.bos_id;
  }
  out.config = std::move(c);
  out.storage = storage;
  return out;
}

}  // namespace fak
