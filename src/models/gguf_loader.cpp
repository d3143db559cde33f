// GGUF model loading: the metadata gives the config (gguf_config.cpp), then every entry of the
// family's tensor table (tensor_table.h) is found by its llama.cpp name, its dims and type checked,
// and bound in place (quantised matrices stay quantised) after undoing llama.cpp's reorderings.
// ggml dims are ne0 first, so a [rows, cols] matrix is stored with dims {cols, rows} and a stack
// of experts with {cols, rows, n_experts}.
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
#include "io/ggml_type.h"
#include "models/gguf_tokenizer.h"
#include "models/quant_policy.h"
#include "models/qwen35_gguf.h"
#include "models/tensor_table.h"
#include "quant/quant.h"

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
  // A file over a third of the machine's memory: its page cache is dropped as it is copied, so the
  // copy's huge pages come from free memory rather than from reclaiming a cache the copy itself
  // would push out anyway (an 18.6 GB file on 24 GiB: 15.3 of 18.3 GB in huge pages, the rest on
  // 4 KiB pages and their TLB misses, when the cache was kept). Smaller files keep it: a second
  // load then reads memory, not the disk.
  const long pages = sysconf(_SC_PHYS_PAGES), page_bytes = sysconf(_SC_PAGESIZE);
  const bool drop_cache =
      pages > 0 && page_bytes > 0 && double(st.st_size) * 3.0 > double(pages) * double(page_bytes);
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
    if (drop_cache)
      posix_fadvise(fd, off_t(size_t(c) * kChunk), off_t(end - size_t(c) * kChunk),
                    POSIX_FADV_DONTNEED);
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

  const GgufTensor& tensor(const std::string& name, const std::vector<int64_t>& dims,
                           const std::vector<int64_t>* also = nullptr) {
    const GgufTensor* t = f_.tensor(name);
    if (!t) fail(f_.name() + ": missing tensor '" + name + "'");
    used_.insert(name);
    if (t->dims != dims && !(also && t->dims == *also))
      fail(f_.name() + ": tensor '" + name + "' has dims " + dims_str(t->dims) + ", expected " +
           dims_str(dims) + " from the metadata");
    return *t;
  }

  void load(const TensorDef& d) {
    switch (d.kind) {
      case TensorKind::Vector:
        *d.vector = vector(d);
        return;
      case TensorKind::Matrix:
        *d.matrix = ordered(d, matrix(d));
        return;
      case TensorKind::Experts: {
        // {cols, rows, n_experts}: expert e's rows follow expert e - 1's.
        const GgufTensor& t = tensor(d.gguf, {d.cols, d.rows, d.n_experts});
        const WType type = type_of(t, d.gguf);
        const size_t row_bytes = wtype_row_bytes(type, d.cols);
        for (int e = 0; e < d.n_experts; ++e)
          (*d.experts)[size_t(e)] = WeightMatrix{
              type, t.data + size_t(e) * size_t(d.rows) * row_bytes, d.rows, d.cols, row_bytes};
        return;
      }
    }
  }

  void check_all_used() const {
    for (const GgufTensor& t : f_.tensors()) {
      if (used_.count(t.name) || t.name == "rope_freqs.weight") continue;
      // Multi-token-prediction (NextN) blocks sit past the decoder's layers: not used to decode.
      if (t.name.rfind("blk.", 0) == 0 && std::atoi(t.name.c_str() + 4) >= c_.n_layers) continue;
      fail(f_.name() + ": unexpected tensor '" + t.name + "' " + dims_str(t.dims) +
           " that the metadata does not account for");
    }
  }

 private:
  WType type_of(const GgufTensor& t, const std::string& name) const {
    const std::optional<WType> type = wtype_from_ggml(t.ggml_type);
    if (!type) {
      const GgmlTypeInfo* info = ggml_type_info(t.ggml_type);
      fail(f_.name() + ": tensor '" + name + "' has type " +
           (info ? std::string(info->name) : std::to_string(t.ggml_type)) +
           ", which fak cannot compute with (supported: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 "
           "q2_K q3_K q4_K q5_K q6_K iq4_nl iq4_xs mxfp4)");
    }
    return *type;
  }

  WeightMatrix matrix(const TensorDef& d) {
    // A one-row matrix may be written as 1-D (llama.cpp drops trailing 1-dims).
    const std::vector<int64_t> one_d = {d.cols};
    const GgufTensor& t = tensor(d.gguf, {d.cols, d.rows}, d.rows == 1 ? &one_d : nullptr);
    const WType type = type_of(t, d.gguf);
    return WeightMatrix{type, t.data, d.rows, d.cols, wtype_row_bytes(type, d.cols)};
  }

  // f32 values [rows][cols] ({rows} when cols is 1, else dims {cols, rows}).
  std::vector<float> vector(const TensorDef& d) {
    const GgufTensor& t = d.cols == 1 ? tensor(d.gguf, {d.rows}) : tensor(d.gguf, {d.cols, d.rows});
    const std::optional<WType> type = wtype_from_ggml(t.ggml_type);
    const int64_t row = d.cols == 1 ? d.rows : d.cols;
    if (!type || (wtype_quant(*type) && row % wtype_block(*type) != 0))
      fail(f_.name() + ": tensor '" + d.gguf + "' has an unsupported type for a vector");
    std::vector<float> v(size_t(d.rows * d.cols));
    const int64_t rows = d.cols == 1 ? 1 : d.rows;
    const WeightMatrix m{*type, t.data, rows, row, wtype_row_bytes(*type, row)};
    for (int64_t r = 0; r < rows; ++r) dequantize_row(m, r, &v[size_t(r * row)]);
    if (d.hf_value == HfValue::NegExp)
      for (float x : v)
        if (!(x < 0)) fail(f_.name() + ": " + d.gguf + " must be negative (it is -exp(A_log))");
    switch (d.gguf_order) {
      case GgufOrder::AsIs:
        return v;
      case GgufOrder::RopePairs: {
        std::vector<float> out(v.size());
        for (size_t r = 0; r < v.size(); ++r)
          out[size_t(llama_unpermuted_row(int64_t(r), int(d.order_per_head)))] = v[r];
        return out;
      }
      case GgufOrder::VHeadRows: {
        const VHeadOrder order = v_order();
        if (order.identity() || keep_tiled(d)) return v;
        return reorder_v_vec(v, d.order_offset * d.cols, d.order_per_head * d.cols, order, false);
      }
      case GgufOrder::VHeadCols:
        break;
    }
    fail("tensor table: '" + d.gguf + "' cannot be reordered by columns");
  }

  VHeadOrder v_order() const { return {c_.linear_num_key_heads, c_.linear_num_value_heads}; }

  // Whether d's layer keeps its value heads in the file's tiled order (TensorDef::v_heads_tiled):
  // when its out_proj's blocks straddle value heads, so its columns cannot be moved back whole.
  // (They were once widened to f32, reordered and quantised again as Q8_0: twice the bytes a
  // token of a Q4_K out_proj, computed at another precision than the file's.) Recorded in the
  // layer's weights for the forward.
  bool keep_tiled(const TensorDef& d) {
    if (!d.v_heads_tiled || v_order().identity()) return false;
    const size_t layer_end = d.gguf.find('.', d.gguf.find('.') + 1);  // "blk.N."
    const GgufTensor* out = layer_end == std::string::npos
                                ? nullptr
                                : f_.tensor(d.gguf.substr(0, layer_end + 1) + "ssm_out.weight");
    const std::optional<WType> type = out ? wtype_from_ggml(out->ggml_type) : std::nullopt;
    const bool keep = type && c_.linear_value_head_dim % wtype_block(*type) != 0;
    if (keep) *d.v_heads_tiled = true;
    return keep;
  }

  // Undoes llama.cpp's order on a matrix: HF's rotate-half rows for llama q/k, HF's grouped value
  // heads for Qwen3.5 DeltaNet.
  WeightMatrix ordered(const TensorDef& d, WeightMatrix m) {
    switch (d.gguf_order) {
      case GgufOrder::AsIs:
        return m;
      case GgufOrder::RopePairs: {
        std::vector<uint8_t> rows(m.bytes());
        for (int64_t r = 0; r < m.rows; ++r)
          std::memcpy(
              rows.data() + size_t(llama_unpermuted_row(r, int(d.order_per_head))) * m.row_bytes,
              m.row(r), m.row_bytes);
        return repacked(m, std::move(rows));
      }
      case GgufOrder::VHeadRows: {
        const VHeadOrder order = v_order();
        if (order.identity() || keep_tiled(d)) return m;
        return repacked(m, reorder_v_rows(static_cast<const uint8_t*>(m.data), m.rows, m.row_bytes,
                                          d.order_offset, d.order_per_head, order, false));
      }
      case GgufOrder::VHeadCols: {
        const VHeadOrder order = v_order();
        if (order.identity() || keep_tiled(d)) return m;
        return repacked(m, reorder_v_cols(m, d.order_per_head, order, false, d.gguf));
      }
    }
    return m;
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
    if (t) m.type = *t;
    m.row_bytes = wtype_row_bytes(m.type, m.cols);
    check(bytes.size() == m.bytes(), "repacked: wrong size");
    s_.repacked.push_back(std::move(bytes));
    m.data = s_.repacked.back().data();
    return m;
  }

  static std::string dims_str(const std::vector<int64_t>& d) {
    std::string s = "[";
    for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
    return s + "]";
  }

  const GgufFile& f_;
  const ModelConfig& c_;
  Storage& s_;
  std::set<std::string> used_;
};

}  // namespace

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
  ModelConfig c = gguf_model_config(f);
  Loader ld(f, c, *storage);
  ModelWeights& w = out.weights;
  for (const TensorDef& d : tensor_table(c, w)) ld.load(d);
  if (c.tie_embeddings) w.lm_head = w.embed;
  w.bytes = matrix_bytes(c, w);
  ld.check_all_used();

  // Read into memory of our own (not mapped): quantised matrices become the matmul kernel's
  // panels in place, once (the model's identity hashes the file on disk, as stored:
  // models/model_identity.h). A tied embedding is packed once for both its uses (lookups read
  // panels through dequantize_row).
  if (!use_mmap && pack_panels) pack_weight_panels(c, w);
  if (load_tokenizer && f.find("tokenizer.ggml.model")) {
    out.tokenizer = tokenizer_spec_from_gguf(f);
    if (c.bos_id && !out.tokenizer->bos_id) out.tokenizer->bos_id = c.bos_id;
  }
  // Everything the model reads from the metadata has been read: the file stays for its tensors.
  storage->file->release_arrays();
  out.config = std::move(c);
  out.storage = storage;
  return out;
}

}  // namespace fak
