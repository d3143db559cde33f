// Model loading: a Hugging Face directory (config.json + safetensors) today; the family is picked
// from config.json and normalised into ModelConfig, weights are checked tensor by tensor.
#include "models/model.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/hash.h"
#include "runtime/kv_cache.h"
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

}  // namespace

std::shared_ptr<const Model> Model::load(const std::filesystem::path& path, const LoadOptions& options) {
  std::shared_ptr<Model> m(new Model());
  m->path_ = path;
  if (!std::filesystem::exists(path)) fail("model path " + path.string() + " does not exist");
  if (!std::filesystem::is_directory(path))
    fail(path.string() + ": expected a Hugging Face model directory (config.json + *.safetensors)");
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
  m->identity_ = h.hex();

  if (options.load_tokenizer && std::filesystem::exists(path / "tokenizer.json"))
    m->tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_dir(path));
  m->init_derived();
  return m;
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
