#include "models/gguf_synth.h"

#include <omp.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "io/gguf_writer.h"
#include "models/gguf_loader.h"
#include "models/gguf_tokenizer.h"
#include "models/quant_policy.h"
#include "models/tensor_table.h"
#include "models/weights.h"

namespace fak {

namespace {

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The values of row `row` of a tensor seeded `seed`: its own stream, so the bytes depend on the
// seed alone, not on the thread count or the chunking.
void fill_row(const TensorDef& d, uint64_t seed, int64_t row, float sigma, float* out, size_t n) {
  if (d.init != TensorDef::Init::Random) {  // a norm's identity as the file holds it, or ones
    std::fill(out, out + n, 1.0f);
    return;
  }
  uint64_t s = seed ^ (uint64_t(row) * 0xd1b54a32d192ed03ull);
  for (size_t i = 0; i < n; ++i) {  // Box-Muller
    const double u1 = (double(splitmix(s) >> 11) + 0.5) * 0x1.0p-53;
    const double u2 = double(splitmix(s) >> 11) * 0x1.0p-53;
    const float v =
        float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2)) * sigma;
    out[i] = d.hf_value == HfValue::NegExp ? -std::exp(v) : v;
  }
}

// Rows [r0, r0 + n) of a [rows, cols] matrix, converted to `type` (rows of one matrix are
// quantised independently, so chunks give the bytes the whole would).
std::vector<uint8_t> matrix_rows(const TensorDef& d, uint64_t seed, int64_t r0, int64_t n,
                                 float sigma, WType type) {
  const size_t cols = size_t(d.cols);
  std::vector<float> v(size_t(n) * cols);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) fill_row(d, seed, r0 + r, sigma, &v[size_t(r) * cols], cols);
  WeightMatrix m;
  m.type = WType::F32;
  m.data = v.data();
  m.rows = n;
  m.cols = d.cols;
  m.row_bytes = cols * sizeof(float);
  return type == WType::F32 ? std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(v.data()),
                                                   reinterpret_cast<const uint8_t*>(v.data()) +
                                                       v.size() * sizeof(float))
                            : convert_matrix(m, type);
}

}  // namespace

ExportStats synth_gguf(const ModelConfig& c, const TokenizerSpec& tokenizer, FileType ft,
                       uint64_t seed, float sigma, const std::filesystem::path& out) {
  GgufWriter w;
  write_gguf_config(w, c, ft, out.stem().string());
  write_gguf_tokenizer(w, tokenizer, c.vocab);
  ExportStats stats;
  ModelWeights shells;  // sized by the table; no data: the walk only names and shapes tensors
  uint64_t s = seed;
  // Rows a chunk converts at once: about 64 MiB of f32.
  auto chunk_rows = [](int64_t cols) { return std::max<int64_t>(16, (int64_t(16) << 20) / cols); };
  for (const TensorDef& d : tensor_table(c, shells)) {
    const uint64_t tensor_seed = splitmix(s);
    if (d.kind == TensorKind::Vector) {
      std::vector<int64_t> dims = {d.rows};
      if (d.cols > 1) dims = {d.cols, d.rows};
      const TensorDef def = d;
      w.add_tensor_made(d.gguf, ggml_type_of(WType::F32), dims,
                        [def, tensor_seed, sigma](const GgufWriter::TensorSink& sink) {
                          std::vector<float> v(size_t(def.rows * def.cols));
                          fill_row(def, tensor_seed, 0, sigma, v.data(), v.size());
                          sink({reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4});
                        });
      stats.bytes += size_t(d.rows * d.cols) * 4;
      stats.types["f32"]++;
    } else {
      const WType t = gguf_tensor_type(c, ft, d, d.cols);
      const int experts = d.kind == TensorKind::Experts ? d.n_experts : 1;
      std::vector<int64_t> dims = {d.cols, d.rows};
      if (d.kind == TensorKind::Experts) dims.push_back(experts);
      const TensorDef def = d;
      const int64_t step = chunk_rows(d.cols);
      w.add_tensor_made(
          d.gguf, ggml_type_of(t), dims,
          [def, tensor_seed, sigma, t, experts, step](const GgufWriter::TensorSink& sink) {
            // An expert is rows [e rows, (e + 1) rows) of one stream.
            const int64_t rows = def.rows * experts;
            for (int64_t r0 = 0; r0 < rows; r0 += step) {
              const std::vector<uint8_t> b =
                  matrix_rows(def, tensor_seed, r0, std::min(step, rows - r0), sigma, t);
              sink(b);
            }
          });
      stats.bytes += wtype_row_bytes(t, d.cols) * size_t(d.rows) * size_t(experts);
      stats.types[std::string(wtype_name(t))]++;
    }
    stats.tensors++;
  }
  w.write(out);
  return stats;
}

}  // namespace fak
