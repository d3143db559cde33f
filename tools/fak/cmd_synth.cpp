// fak synth: a random-weight Hugging Face model directory from a config.json, for benchmarks and
// conversion tests at real shapes without downloading checkpoints. Norm weights are 1, every other
// tensor normal(0, std); Qwen-vocabulary configs get the bundled Qwen tokenizer.
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common.h"
#include "core/dtype.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "models/config.h"

namespace fak::cli {

namespace {

struct SynthArgs {
  std::string config, out, dtype = "bf16", tokenizer;
  uint64_t seed = 0;
  float std = 0.02f;
  int threads = 0;
};

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  bool ones = false;
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
      float v = 1.0f;
      if (!t.ones) {  // Box-Muller
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
  const ModelConfig c = parse_hf_config(j, a.config);
  if (c.is_hybrid()) fail("fak synth: hybrid (Gated DeltaNet) configs are not supported yet");

  std::vector<Tensor> ts;
  auto add = [&](std::string name, std::vector<int64_t> shape, bool ones = false) {
    ts.push_back({std::move(name), std::move(shape), ones, {}});
  };
  add("model.embed_tokens.weight", {c.vocab, c.dim});
  add("model.norm.weight", {c.dim}, true);
  if (!c.tie_embeddings) add("lm_head.weight", {c.vocab, c.dim});
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {c.dim}, true);
    add(p + "post_attention_layernorm.weight", {c.dim}, true);
    add(p + "self_attn.q_proj.weight", {c.q_dim(), c.dim});
    add(p + "self_attn.k_proj.weight", {c.kv_dim(), c.dim});
    add(p + "self_attn.v_proj.weight", {c.kv_dim(), c.dim});
    add(p + "self_attn.o_proj.weight", {c.dim, c.q_dim()});
    if (c.qkv_bias) {
      add(p + "self_attn.q_proj.bias", {c.q_dim()});
      add(p + "self_attn.k_proj.bias", {c.kv_dim()});
      add(p + "self_attn.v_proj.bias", {c.kv_dim()});
    }
    if (c.attn_output_bias) add(p + "self_attn.o_proj.bias", {c.dim});
    if (c.qk_norm) {
      add(p + "self_attn.q_norm.weight", {c.head_dim}, true);
      add(p + "self_attn.k_norm.weight", {c.head_dim}, true);
    }
    add(p + "mlp.gate_proj.weight", {c.hidden_dim, c.dim});
    add(p + "mlp.up_proj.weight", {c.hidden_dim, c.dim});
    add(p + "mlp.down_proj.weight", {c.dim, c.hidden_dim});
    if (c.mlp_bias) {
      add(p + "mlp.gate_proj.bias", {c.hidden_dim});
      add(p + "mlp.up_proj.bias", {c.hidden_dim});
      add(p + "mlp.down_proj.bias", {c.dim});
    }
  }
  uint64_t s = a.seed;
  std::vector<TensorToWrite> out;
  for (Tensor& t : ts) {
    fill(t, dtype, splitmix(s), a.std);
    out.push_back({t.name, dtype, t.shape, t.bytes});
  }
  const std::filesystem::path dir(a.out);
  std::filesystem::create_directories(dir);
  write_safetensors(dir / "model.safetensors", out, {{"format", "pt"}});
  j.erase("torch_dtype");
  j["dtype"] = a.dtype == "bf16" ? "bfloat16" : a.dtype == "f16" ? "float16" : "float32";
  write_file_atomic(dir / "config.json", j.dump(2));

  std::filesystem::path tok = a.tokenizer;
  if (tok.empty() && c.vocab >= 151643)  // the Qwen2/2.5/3 vocabulary (151643 BPE + added tokens)
    tok = std::filesystem::path(FAK_DEFAULT_MODEL_DIR) / "../../tests/data/tokenizer/qwen";
  if (!tok.empty()) {
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      if (std::filesystem::exists(tok / f))
        std::filesystem::copy_file(tok / f, dir / f,
                                   std::filesystem::copy_options::overwrite_existing);
  }
  size_t bytes = 0;
  for (const Tensor& t : ts) bytes += t.bytes.size();
  std::printf("wrote %s: %zu tensors, %.1f MiB %s%s\n", a.out.c_str(), ts.size(),
              double(bytes) / (1 << 20), a.dtype.c_str(), tok.empty() ? " (no tokenizer)" : "");
}

}  // namespace

void register_synth(CLI::App& app) {
  auto a = std::make_shared<SynthArgs>();
  CLI::App* c =
      app.add_subcommand("synth", "write a random-weight HF model directory from a config");
  c->add_option("--config", a->config, "config.json (e.g. tests/data/configs/*.json)")->required();
  c->add_option("-o,--out", a->out, "output directory")->required();
  c->add_option("--dtype", a->dtype, "bf16 (default), f16 or f32")
      ->check(CLI::IsMember({"bf16", "f16", "f32"}));
  c->add_option("--seed", a->seed, "random seed");
  c->add_option("--std", a->std, "standard deviation of the weights (default 0.02)");
  c->add_option("--tokenizer", a->tokenizer, "copy tokenizer.json (+ config) from this directory");
  c->add_option("-t,--threads", a->threads, "threads (default: all cores)");
  c->callback([a] { synth(*a); });
}

}  // namespace fak::cli
