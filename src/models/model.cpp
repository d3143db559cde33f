// Model loading: a Hugging Face directory (config.json + safetensors) today; the family is picked
// from config.json and normalised into ModelConfig, weights are checked tensor by tensor.
#include "models/model.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/hash.h"
#include "memory/kv_cache.h"
#include "memory/kv_storage.h"
#include "models/device_forward.h"
#include "models/gguf_loader.h"
#include "models/quant_policy.h"
#include "tokenizer/tokenizer.h"

namespace fak {

Model::Model() = default;
Model::~Model() = default;

namespace {

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// --quant at load: every matrix converted as `fak convert --type` would (llama.cpp's mix rules, so
// a q8_0 load computes what a q8_0 GGUF would).
std::shared_ptr<void> quantise_weights(ModelWeights& w, const ModelConfig& c, QuantType q) {
  FileType ft = FileType::Q8_0;
  switch (q) {
    case QuantType::Q8_0:
      ft = FileType::Q8_0;
      break;
    case QuantType::Q4_0:
      ft = FileType::Q4_0;
      break;
    case QuantType::Q4_1:
      ft = FileType::Q4_1;
      break;
    case QuantType::Q5_0:
      ft = FileType::Q5_0;
      break;
    case QuantType::Q5_1:
      ft = FileType::Q5_1;
      break;
    case QuantType::Q4_K:
      ft = FileType::Q4_K_M;
      break;
    case QuantType::Q5_K:
      ft = FileType::Q5_K_M;
      break;
    case QuantType::Q6_K:
      ft = FileType::Q6_K;
      break;
    case QuantType::Q8_K:
      fail("--quant q8_k: Q8_K is an activation format, not a weight type");
  }
  auto owned = std::make_shared<std::vector<std::vector<uint8_t>>>();
  auto convert = [&](WeightMatrix& m, TensorRole role, int layer) {
    const WType t = choose_wtype(ft, role, layer, c.n_layers, m.cols, c.tie_embeddings);
    if (t == m.type || !wtype_quant(t)) return;  // rows that fit no block type stay as stored
    owned->push_back(convert_matrix(m, t));
    w.bytes -= m.bytes();
    m = WeightMatrix{t, owned->back().data(), m.rows, m.cols, wtype_row_bytes(t, m.cols)};
    w.bytes += m.bytes();
  };
  const bool tied = w.lm_head.data == w.embed.data;
  convert(w.embed, TensorRole::TokenEmbd, 0);
  if (tied)
    w.lm_head = w.embed;
  else
    convert(w.lm_head, TensorRole::Output, 0);
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = w.layers[size_t(l)];
    if (L.kind == LayerKind::FullAttention) {
      convert(L.attn.wq, TensorRole::AttnQ, l);
      convert(L.attn.wk, TensorRole::AttnK, l);
      convert(L.attn.wv, TensorRole::AttnV, l);
      convert(L.attn.wo, TensorRole::AttnOutput, l);
    } else {
      for (WeightMatrix* m : {&L.delta.in_proj_qkv, &L.delta.in_proj_z, &L.delta.in_proj_b,
                              &L.delta.in_proj_a, &L.delta.out_proj})
        convert(*m, TensorRole::AttnOutput, l);
    }
    convert(L.mlp.gate, TensorRole::FfnGate, l);
    convert(L.mlp.up, TensorRole::FfnUp, l);
    convert(L.mlp.down, TensorRole::FfnDown, l);
  }
  return owned;
}

}  // namespace

std::shared_ptr<const Model> Model::load(const std::filesystem::path& path,
                                         const LoadOptions& options) {
  std::shared_ptr<Model> m(new Model());
  m->path_ = path;
  if (!std::filesystem::exists(path)) fail("model path " + path.string() + " does not exist");
  if (!std::filesystem::is_directory(path) && path.extension() == ".gguf") {
    if (options.quant)
      fail(path.string() +
           ": --quant applies to Hugging Face directories; use fak quantize for GGUF files");
    GgufModel g = load_gguf_model(path, options.mmap, options.load_tokenizer,
                                  options.device.kind == DeviceKind::Cpu);
    m->config_ = std::move(g.config);
    m->weights_ = std::move(g.weights);
    m->extra_storage_ = std::move(g.storage);
    m->identity_ = g.identity;
    m->weights_memory_ = g.memory;
    if (g.tokenizer)
      m->tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_spec(std::move(*g.tokenizer)));
    m->init_derived();
    m->place_on(options.device);
    return m;
  }
  if (!std::filesystem::is_directory(path))
    fail(path.string() +
         ": expected a Hugging Face model directory (config.json + *.safetensors) or a .gguf file");
  const auto config_path = path / "config.json";
  if (!std::filesystem::exists(config_path)) fail(path.string() + ": no config.json");
  m->config_ = load_hf_config(config_path);
  m->store_ = std::make_shared<TensorStore>(TensorStore::open_dir(path));
  std::string prefix = "model.";
  if (m->store_->find("model.language_model.embed_tokens.weight")) prefix = "model.language_model.";
  m->weights_ = load_hf_weights(*m->store_, m->config_, prefix);

  Fnv1a h;
  h.update(read_text(config_path));
  for (const TensorInfo* t : m->store_->all()) {
    h.update(t->name);
    h.update(t->shape_string());
    h.update(dtype_name(t->dtype));
    // A sample of the bytes: enough to tell two checkpoints of one shape apart without a full read.
    h.update(t->data, std::min<size_t>(t->nbytes, 256));
    if (t->nbytes > 256) h.update(t->data + t->nbytes - 256, 256);
  }
  if (options.quant) {
    m->extra_storage_ = quantise_weights(m->weights_, m->config_, *options.quant);
    // The quantised matrices are buffers of our own; a device reads rows as stored.
    if (options.device.kind == DeviceKind::Cpu) pack_weight_panels(m->weights_);
    h.update("quant:" + std::string(quant_type_name(*options.quant)));
    m->weights_memory_ = "quantised";
  }
  m->identity_ = h.hex();

  if (options.load_tokenizer && std::filesystem::exists(path / "tokenizer.json"))
    m->tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_dir(path));
  m->init_derived();
  m->place_on(options.device);
  return m;
}

void Model::place_on(const Device& device) {
  device_ = device;
  if (device.kind == DeviceKind::Cpu) return;
  const std::string problem = device_unavailable_reason(device);
  if (!problem.empty()) fail("--device " + device.name() + ": " + problem);
  device_forward_ = make_cuda_forward(*this, device.index);
  // A device computes other bits than the CPU: KV and logits saved from one (session files, the
  // prefix cache on disk) must not be spliced into the other's runs, which would then differ from
  // a cold run. The identity those files are checked against says where they were computed.
  identity_ += "-cuda";
}

void Model::reserve_device_scratch(int tokens, int logit_rows) const {
  if (device_forward_) device_forward_->reserve_scratch(tokens, logit_rows);
}

std::shared_ptr<KvStorage> Model::make_kv_storage() const {
  return device_forward_ ? device_forward_->kv_storage() : host_kv_storage();
}

int Model::sampleable_vocab() const {
  return tokenizer_ ? std::min(tokenizer_->vocab_size(), config_.vocab) : config_.vocab;
}

void Model::init_derived() {
  rope_ = std::make_unique<Rope>(config_);
  attention_index_.assign(size_t(config_.n_layers), -1);
  n_attention_layers_ = 0;
  for (int l = 0; l < config_.n_layers; ++l)
    if (config_.layer_kinds[size_t(l)] == LayerKind::FullAttention)
      attention_index_[size_t(l)] = n_attention_layers_++;
}

}  // namespace fak
