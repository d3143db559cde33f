// fak synth: a random-weight Hugging Face model directory from a config.json, for benchmarks and
// conversion tests at real shapes without downloading checkpoints. Norms are the identity (1, or 0
// where the family stores 1 + w), every other tensor normal(0, std); Qwen2/2.5/3-vocabulary configs
// get the bundled Qwen tokenizer. Every family fak runs, the Qwen3.5 hybrids and MoE models
// included.
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "common.h"
#include "core/dtype.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "models/config.h"
#include "models/gguf_synth.h"
#include "models/tensor_table.h"

namespace fak::cli {

namespace {

struct SynthArgs {
  std::string config, out, dtype = "bf16", tokenizer, gguf_type;
  uint64_t seed = 0;
  float std = 0.02f;
  int threads = 0;
  std::optional<int> layers;
};

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

enum class Fill { Normal, One, Zero };

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  Fill fill = Fill::Normal;
  std::string bytes;
};

// Chunks of 64K values each get their own stream, so the bytes depend on the seed only (not on
// the thread count).
void fill(Tensor& t, DType dtype, uint64_t seed, float sigma) {
  size_t n = 1;
  for (int64_t d : t.shape) n *= size_t(d);
  const size_t es = dtype == DType::F32 ? 4 : 2;
  t.bytes.resize(n * es);
  constexpr size_t kChunk = 1 << 16;
  const int64_t chunks = int64_t((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    uint64_t s = seed ^ (uint64_t(c) * 0xd1b54a32d192ed03ull);
    for (size_t i = size_t(c) * kChunk; i < std::min(n, size_t(c + 1) * kChunk); ++i) {
      float v = t.fill == Fill::One ? 1.0f : 0.0f;
      if (t.fill == Fill::Normal) {  // Box-Muller
        const double u1 = (double(splitmix(s) >> 11) + 0.5) * 0x1.0p-53;
        const double u2 = double(splitmix(s) >> 11) * 0x1.0p-53;
        v = float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2)) * sigma;
      }
      if (dtype == DType::F32) {
        std::memcpy(&t.bytes[i * 4], &v, 4);
      } else {
        const uint16_t h = dtype == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
        std::memcpy(&t.bytes[i * 2], &h, 2);
      }
    }
  }
}

// The Hugging Face tensors of the family's table (models/tensor_table.h) at the config's shapes,
// each once (a fused experts tensor serves two entries), so a synthesised directory loads without
// a single unexpected or missing tensor.
std::vector<Tensor> tensor_list(const ModelConfig& c, const std::string& prefix) {
  std::vector<Tensor> ts;
  std::set<std::string> seen;
  auto add = [&](std::string name, std::vector<int64_t> shape, Fill f) {
    if (seen.insert(name).second) ts.push_back({std::move(name), std::move(shape), f, {}});
  };
  ModelWeights w;
  for (const TensorDef& d : tensor_table(c, w)) {
    const std::string name = d.hf_root ? d.hf : prefix + d.hf;
    // Norms that scale by (1 + w) are stored zero-centred: 0 is the identity, as 1 is elsewhere.
    Fill fill = Fill::Normal;
    if (d.init == TensorDef::Init::Ones) fill = Fill::One;
    if (d.init == TensorDef::Init::NormScale)
      fill = d.hf_value == HfValue::PlusOne ? Fill::Zero : Fill::One;
    switch (d.hf_layout) {
      case HfLayout::Plain:
        if (d.kind == TensorKind::Vector) {
          add(name,
              d.cols > 1 ? std::vector<int64_t>{d.rows, d.cols} : std::vector<int64_t>{d.rows},
              fill);
        } else {
          add(name, {d.rows, d.cols}, fill);
        }
        break;
      case HfLayout::Conv:
        add(name, {d.rows, 1, d.cols}, fill);
        break;
      case HfLayout::PerExpert:
        for (int e = 0; e < d.n_experts; ++e) {
          std::string n = name;
          add(n.replace(n.find("{e}"), 3, std::to_string(e)), {d.rows, d.cols}, fill);
        }
        break;
      case HfLayout::Stacked:
        add(name, {d.n_experts, d.rows, d.cols}, fill);
        break;
      case HfLayout::FusedFirst:
      case HfLayout::FusedSecond:
        add(name, {d.n_experts, 2 * d.rows, d.cols}, fill);
        break;
      case HfLayout::StackedTransposed:
        add(name, {d.n_experts, d.cols, d.rows}, fill);
        break;
      case HfLayout::InterleavedEven:
      case HfLayout::InterleavedOdd:
        if (d.kind == TensorKind::Vector)
          add(name, {d.rows, 2 * d.cols}, fill);
        else
          add(name, {d.n_experts, d.cols, 2 * d.rows}, fill);
        break;
    }
  }
  return ts;
}

// --layers: keeps the first n layers (and their layer_types), so a real width fits in memory.
// Hybrids repeat a period of linear layers closed by a full-attention layer; a cut inside a
// period would change the model's shape, so n must be a whole number of periods.
void override_layers(nlohmann::json& text, const ModelConfig& c, int n, const std::string& label) {
  if (n <= 0) fail("fak synth: --layers must be positive, got " + std::to_string(n));
  if (c.is_hybrid()) {
    int interval = text.value("full_attention_interval", 0);
    if (interval <= 0)  // no interval given: the distance to the first full-attention layer
      for (int l = 0; l < c.n_layers && interval <= 0; ++l)
        if (c.layers[size_t(l)].mixer == LayerKind::FullAttention) interval = l + 1;
    if (interval <= 0 || n % interval != 0)
      fail("fak synth: --layers " + std::to_string(n) + " must be a multiple of " + label +
           "'s full_attention_interval (" + std::to_string(interval) + ")");
  }
  text["num_hidden_layers"] = n;
  if (text.contains("layer_types") && text["layer_types"].is_array()) {
    nlohmann::json kinds = nlohmann::json::array();
    for (int l = 0; l < n; ++l) {
      // More layers than the file lists: continue its pattern.
      const size_t src = size_t(l) % text["layer_types"].size();
      kinds.push_back(text["layer_types"][src]);
    }
    text["layer_types"] = kinds;
  }
}

// Writes shards of at most kShardBytes each (HF's sharded layout with an index), so peak memory
// is about two shards, not twice the model: a 27B-wide layer stack does not fit twice in RAM.
constexpr size_t kShardBytes = size_t(2) << 30;

void synth(const SynthArgs& a) {
  set_threads(a.threads);
  const DType dtype = a.dtype == "bf16" ? DType::BF16 : a.dtype == "f16" ? DType::F16 : DType::F32;
  std::ifstream in(a.config);
  if (!in) fail("cannot open " + a.config);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(a.config + ": not valid JSON: " + e.what());
  }
  ModelConfig c = parse_hf_config(j, a.config);
  // Multimodal Qwen3.5 checkpoints nest the text model (config and weights) one level down.
  const bool nested =
      j.contains("text_config") && j["text_config"].is_object() && !j.contains("hidden_size");
  nlohmann::json& text = nested ? j["text_config"] : j;
  if (a.layers) {
    override_layers(text, c, *a.layers, a.config);
    c = parse_hf_config(j, a.config);
  }
  std::filesystem::path tok = a.tokenizer;
  if (tok.empty() && c.vocab >= 151643 && c.vocab < 200000)  // the Qwen2/2.5/3 vocabulary
    tok = std::filesystem::path(FAK_DEFAULT_MODEL_DIR) / "../../tests/data/tokenizer/qwen";
  if (!a.gguf_type.empty()) {
    // Straight into a GGUF of that type, tensor by tensor: no HF directory, no F16 file.
    if (tok.empty()) fail("fak synth --gguf-type: a GGUF needs a vocabulary: give --tokenizer DIR");
    const FileType ft = parse_file_type(a.gguf_type);
    const Tokenizer t = Tokenizer::from_dir(tok);
    const ExportStats st = synth_gguf(c, t.spec(), ft, a.seed, a.std, a.out);
    std::printf("wrote %s: %s, %d layers\n", a.out.c_str(), st.summary().c_str(), c.n_layers);
    return;
  }
  std::vector<Tensor> ts = tensor_list(c, nested ? "model.language_model." : "model.");

  const size_t es = dtype_size(dtype);
  std::vector<std::vector<size_t>> shards(1);
  size_t shard_bytes = 0, bytes = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    size_t n = es;
    for (int64_t d : ts[i].shape) n *= size_t(d);
    if (shard_bytes > 0 && shard_bytes + n > kShardBytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(i);
    shard_bytes += n;
    bytes += n;
  }
  const std::filesystem::path dir(a.out);
  std::filesystem::create_directories(dir);
  uint64_t s = a.seed;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t k = 0; k < shards.size(); ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
    const std::string file = shards.size() == 1 ? "model.safetensors" : name;
    std::vector<TensorToWrite> out;
    for (size_t i : shards[k]) {
      fill(ts[i], dtype, splitmix(s), a.std);
      out.push_back({ts[i].name, dtype, ts[i].shape, ts[i].bytes});
      weight_map[ts[i].name] = file;
    }
    write_safetensors(dir / file, out, {{"format", "pt"}});
    for (size_t i : shards[k]) std::string().swap(ts[i].bytes);
  }
  if (shards.size() > 1) {
    nlohmann::json index{{"metadata", {{"total_size", bytes}}}, {"weight_map", weight_map}};
    write_file_atomic(dir / "model.safetensors.index.json", index.dump(2));
  }
  text.erase("torch_dtype");
  j.erase("torch_dtype");
  j["dtype"] = a.dtype == "bf16" ? "bfloat16" : a.dtype == "f16" ? "float16" : "float32";
  write_file_atomic(dir / "config.json", j.dump(2));

  if (!tok.empty()) {
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      if (std::filesystem::exists(tok / f))
        std::filesystem::copy_file(tok / f, dir / f,
                                   std::filesystem::copy_options::overwrite_existing);
  }
  std::printf("wrote %s: %zu tensors in %zu file(s), %d layers, %.1f MiB %s%s\n", a.out.c_str(),
              ts.size(), shards.size(), c.n_layers, double(bytes) / (1 << 20), a.dtype.c_str(),
              tok.empty() ? " (no tokenizer)" : "");
}

}  // namespace

void register_synth(CLI::App& app) {
  auto a = std::make_shared<SynthArgs>();
  CLI::App* c =
      app.add_subcommand("synth", "write a random-weight HF model directory from a config");
  c->add_option("--config", a->config, "config.json (e.g. tests/data/configs/*.json)")->required();
  c->add_option("-o,--out", a->out, "output directory (with --gguf-type: the GGUF file)")
      ->required();
  c->add_option("--gguf-type", a->gguf_type,
                "write a GGUF of this type (f16, q8_0, q4_k_m, ...: llama-quantize's per-tensor "
                "types, as fak convert writes them) straight from the random weights, tensor by "
                "tensor: a full-size model without an HF directory or an F16 file");
  c->add_option("--dtype", a->dtype, "bf16 (default), f16 or f32")
      ->check(CLI::IsMember({"bf16", "f16", "f32"}));
  c->add_option("--seed", a->seed, "random seed");
  c->add_option("--std", a->std, "standard deviation of the weights (default 0.02)");
  c->add_option("--tokenizer", a->tokenizer, "copy tokenizer.json (+ config) from this directory");
  c->add_option("-t,--threads", a->threads, "threads (default: all cores)");
  c->add_option("--layers", a->layers,
                "keep only the first N layers (hybrids: a multiple of full_attention_interval)");
  c->callback([a] { synth(*a); });
}

}  // namespace fak::cli
