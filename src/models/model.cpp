// Model loading: a Hugging Face directory (config.json + safetensors) today; the family is picked
// from config.json and normalised into ModelConfig, weights are checked tensor by tensor.
#include "models/model.h"

#include <algorithm>

#include "core/error.h"
#include "io/file_digest.h"
#include "memory/kv_cache.h"
#include "models/gguf_loader.h"
#include "models/model_identity.h"
#include "models/quant_policy.h"
#include "models/tensor_table.h"
#include "tokenizer/tokenizer.h"

namespace fak {

Model::Model() = default;
Model::~Model() = default;

namespace {

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
    case QuantType::MXFP4:
      ft = FileType::MXFP4_MOE;  // as llama.cpp's MXFP4_MOE: MXFP4 experts, Q8_0 elsewhere
      break;
    case QuantType::Q2_K:
      ft = FileType::Q2_K;
      break;
    case QuantType::Q3_K:
      ft = FileType::Q3_K_M;
      break;
    case QuantType::IQ4_NL:
      ft = FileType::IQ4_NL;
      break;
    case QuantType::IQ4_XS:
      ft = FileType::IQ4_XS;
      break;
    case QuantType::Q8_K:
      fail("--quant q8_k: Q8_K is an activation format, not a weight type");
  }
  auto owned = std::make_shared<std::vector<std::vector<uint8_t>>>();
  for_each_matrix(c, w, [&](WeightMatrix& m, const TensorDef& d) {
    if (d.keep_float) return;  // the MoE router and shared-expert gate, as llama-quantize
    const WType t =
        choose_wtype(ft, d.role, std::max(d.layer, 0), c.n_layers, m.cols, c.tie_embeddings,
                     c.n_experts, c.n_kv_heads > 0 ? c.n_heads / c.n_kv_heads : 1);
    if (t == m.type || !wtype_quant(t)) return;  // rows that fit no block type stay as stored
    owned->push_back(convert_matrix(m, t));
    m = WeightMatrix{t, owned->back().data(), m.rows, m.cols, wtype_row_bytes(t, m.cols)};
  });
  if (c.tie_embeddings) w.lm_head = w.embed;
  w.bytes = matrix_bytes(c, w);
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
    // Opened before the load reads the file, so the identity hashes the bytes as stored on disk,
    // not the loader's in-memory rewrites (reordered rows, packed panels).
    m->identity_source_ = ModelIdentitySource::gguf(path);
    GgufModel g = load_gguf_model(path, options.mmap, options.load_tokenizer,
                                  options.device.kind == DeviceKind::Cpu);
    m->config_ = std::move(g.config);
    m->weights_ = std::move(g.weights);
    m->extra_storage_ = std::move(g.storage);
    m->weights_memory_ = g.memory;
    // Layers computing in the file's tiled value-head order (DeltaNetWeights::tiled_v_heads) keep
    // their recurrent state in that order: session files and caches from a fak that moved the heads
    // back (and widened out_proj to Q8_0) must not be taken for this model's.
    for (const LayerWeights& l : m->weights_.layers)
      if (l.delta.tiled_v_heads) {
        m->identity_suffix_ += "-tiledv";
        break;
      }
    if (g.tokenizer)
      m->tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_spec(std::move(*g.tokenizer)));
    m->stretch_context(options.context_past_training);
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
  // A config may name an MTP head its checkpoint does not hold (stripped, or made without it).
  if (m->config_.mtp_layers > 0 && !m->store_->find("mtp.fc.weight")) m->config_.mtp_layers = 0;
  std::string prefix = "model.";
  // Multimodal checkpoints keep the language model beside a vision tower: transformers 4.52+
  // saves it as model.language_model.*, earlier versions (Gemma 3's release) as
  // language_model.model.*.
  if (m->store_->find("model.language_model.embed_tokens.weight")) prefix = "model.language_model.";
  if (m->store_->find("language_model.model.embed_tokens.weight")) prefix = "language_model.model.";
  size_t skipped = 0;
  m->weights_ = load_hf_weights(*m->store_, m->config_, prefix, &skipped);
  if (skipped > 0)
    m->load_note_ = "the checkpoint's " + std::to_string(skipped) +
                    " tensors beside the language model (a vision tower, MTP weights the config "
                    "does not use) are not loaded: fak runs the language model" +
                    (m->config_.mtp_layers > 0 ? " and its MTP head" : "");

  auto identity = ModelIdentitySource::hf_dir(path, m->store_->file_paths());
  if (options.quant) {
    m->extra_storage_ = quantise_weights(m->weights_, m->config_, *options.quant);
    // The quantised matrices are buffers of our own; a device reads rows as stored.
    if (options.device.kind == DeviceKind::Cpu) pack_weight_panels(m->config_, m->weights_);
    identity->set_quant(std::string(quant_type_name(*options.quant)));
    m->weights_memory_ = "quantised";
  }
  m->identity_source_ = std::move(identity);

  if (options.load_tokenizer && std::filesystem::exists(path / "tokenizer.json"))
    m->tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_dir(path));
  m->stretch_context(options.context_past_training);
  m->init_derived();
  m->place_on(options.device);
  return m;
}

void Model::place_on(const Device& device) {
  device_ = device;
  if (device.kind == DeviceKind::Cpu) {
    backend_ = make_cpu_backend();
    return;
  }
  const std::string problem = device_unavailable_reason(device);
  if (!problem.empty()) fail("--device " + device.name() + ": " + problem);
  backend_ = make_cuda_backend(device.index);
  // Ops the device kernels do not have yet: refused here, not in the middle of a forward.
  const std::vector<LayerSpec> layers(layer_specs_.begin() + 1, layer_specs_.end());
  if (const std::string why = backend_->unsupported({config_.embed_scale, layers}); !why.empty())
    fail("--device " + device.name() + ": " + config_.family_name() + " needs " + why +
         ", which runs on the CPU only so far");
  backend_->check_shapes(config_.head_dim, config_.linear_conv_kernel,
                         config_.linear_value_head_dim);
  // The device holds its own copy of every weight the forward reads there; embedding lookups
  // stay on the host unless the table is also the output head.
  for_each_matrix(config_, weights_, [&](WeightMatrix& m, const TensorDef& d) {
    if (d.role != "token_embd") backend_->upload(m);
  });
  if (config_.tie_embeddings) backend_->upload(weights_.lm_head);
  for (int l = -1; l < table_parts_end(config_); ++l)
    for (const TensorDef& d : tensor_table_part(config_, weights_, l))
      if (d.kind == TensorKind::Vector) backend_->upload(*d.vector);
  // A device computes other bits than the CPU: KV and logits saved from one (session files, the
  // prefix cache on disk) must not be spliced into the other's runs, which would then differ from
  // a cold run. The identity those files are checked against says where they were computed.
  identity_suffix_ += "-cuda";
}

const std::string& Model::identity() const {
  std::call_once(identity_once_, [&] {
    identity_ = identity_source_->compute(default_digest_cache_dir()) + identity_suffix_;
  });
  return identity_;
}

void Model::reserve_device_scratch(int tokens, int logit_rows) const {
  backend_->reserve(forward_buffer_sizes(config_, std::max(tokens, 1)), tokens, logit_rows,
                    config_.vocab);
}

std::shared_ptr<KvStorage> Model::make_kv_storage() const {
  return backend_->kv_storage();
}

int Model::sampleable_vocab() const {
  return tokenizer_ ? std::min(tokenizer_->vocab_size(), config_.vocab) : config_.vocab;
}

void Model::stretch_context(int tokens) {
  // context_limit() is the larger of max_seq_len and YaRN's stretch; the RoPE tables are computed
  // per position, so nothing else depends on it.
  const int trained = config_.context_limit();
  if (tokens <= trained) return;
  config_.max_seq_len = std::min(tokens, kMaxSeqLen);
  if (!load_note_.empty()) load_note_ += "; ";
  load_note_ += "warning: a context of " + std::to_string(config_.max_seq_len) +
                " tokens, past the " + std::to_string(trained) +
                " the model was trained for (YaRN included): positions past " +
                std::to_string(trained) + " were never trained, and output there may degrade";
}

void Model::init_derived() {
  rope_ = std::make_unique<Rope>(config_);
  if (config_.rope_local_theta > 0) {
    // Gemma 3's local layers: their own base, no scaling (the global table's scaling is for the
    // long-range layers only, as transformers builds rotary_emb_local).
    ModelConfig local = config_;
    local.rope_theta = config_.rope_local_theta;
    local.rope_scaling = RopeScaling::None;
    local.rope_factor = 1.0;
    local.rope_attention_factor = 1.0;
    rope_local_ = std::make_unique<Rope>(local);
  }
  attention_index_.assign(size_t(config_.n_layers), -1);
  n_attention_layers_ = 0;
  for (int l = 0; l < config_.n_layers; ++l)
    if (config_.layers[size_t(l)].mixer == LayerKind::FullAttention)
      attention_index_[size_t(l)] = n_attention_layers_++;
  layer_specs_.clear();
  for (int l = -1; l < config_.n_layers; ++l) layer_specs_.push_back(config_.layer_spec(l));
}

}  // namespace fak
