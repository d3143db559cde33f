// A loaded model: config + weights + forward. Immutable after load and shared by every session and
// thread. Knows nothing about requests: a forward call takes a batch of (kv blocks, tokens) items
// and writes logits; prefill, decode, batched decode and replay after an eviction are all this one
// call with different batches.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/device.h"
#include "io/safetensors.h"
#include "models/config.h"
#include "models/rope.h"
#include "models/weights.h"
#include "quant/quant_type.h"

namespace fak {

class KvCache;
class KvStorage;
class ModelIdentitySource;
class Tokenizer;
struct RecurrentState;

struct LoadOptions {
  bool load_tokenizer = true;
  // GGUF files: map the file (instant start) or read it into anonymous memory with huge pages
  // advised. Reading is the default: decode measured ~10% faster here (median of 3 interleaved
  // runs, Qwen2.5-0.5B Q4_K_M, 2 threads: 14.7 vs 13.3 tok/s; THP in madvise mode), for a
  // start-up read of the file (~0.3 s per 400 MB from the page cache).
  bool mmap = false;
  // HF directories: quantise every matrix to this type at load (llama.cpp's rules for the mix).
  std::optional<QuantType> quant = std::nullopt;
  // Where the forward pass runs. A device other than the CPU gets its own copy of the weights at
  // load, and caches for the model must be made with make_kv_storage().
  Device device = {};
  // Longer than the model's context (trained, or stretched by YaRN): raises its limit to this, for
  // a user who asks for positions the model never saw (llama.cpp allows it with a warning; the
  // caller says so). 0 or shorter: the model's own.
  int context_past_training = 0;
};

// Per-layer hidden states, for localising a parity divergence: index 0 = embeddings, i = after
// layer i, n_layers + 1 = after the final norm (HF's convention for the last entry).
using HiddenHook = std::function<void(int index, const float* hidden, int n_tokens)>;

// The activation buffers a forward call of T tokens uses (models/forward.cpp).
BufferSizes forward_buffer_sizes(const ModelConfig& c, int T);

class Model {
 public:
  static std::shared_ptr<const Model> load(const std::filesystem::path& path,
                                           const LoadOptions& options = {});
  ~Model();

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  // The token ids a sampler may pick: [0, sampleable_vocab()). With a tokenizer, the ids it can
  // decode (its largest id + 1, added and special tokens included), at most config().vocab;
  // without one, config().vocab. note: real checkpoints pad the embedding and lm_head beyond the
  // tokenizer (Qwen2.5: 151936 rows for 151665 ids); a padded row can win at a high temperature,
  // and no tokenizer can turn it into text.
  int sampleable_vocab() const;
  const std::filesystem::path& path() const { return path_; }
  // The name shared KV blocks, session files and prefix-cache files are keyed and checked on:
  // SHA-256 over every byte that decides the output (models/model_identity.h). Computed on the
  // first call (thread-safe; a cold multi-GB model reads its files once, later starts ask the
  // digest cache), so a run that never asks never pays. Throws fak::Error when a model file
  // cannot be read.
  const std::string& identity() const;
  // Where the weights live: "mmap" (pages of the model file), "anonymous" (a GGUF read into
  // memory) or "quantised" (an HF model converted at load).
  const char* weights_memory() const { return weights_memory_.c_str(); }
  const Rope& rope() const { return *rope_; }
  // RoPE table `table` of ModelConfig::rope_table: 0 the model's, 1 its windowed layers' own.
  const Rope& rope(int table) const { return table == 1 && rope_local_ ? *rope_local_ : *rope_; }
  int n_attention_layers() const { return n_attention_layers_; }
  int attention_index(int layer) const { return attention_index_[size_t(layer)]; }
  // What layer `layer` computes (-1: the MTP head's layer): ModelConfig::layer_spec, made once.
  const LayerSpec& layer_spec(int layer) const { return layer_specs_[size_t(layer + 1)]; }

  void forward(std::span<const BatchItem> batch, KvCache& cache,
               const HiddenHook* hook = nullptr) const;
  // Hybrid models: `state` as it was after the first n tokens of the call `trail` recorded
  // (ops/deltanet.h), from the state before it and the inputs of its DeltaNet layers alone (no
  // matmul): the bits the forward itself computed after those tokens.
  void rewind_state(RecurrentState& state, const DeltaNetTrail& trail, int n) const;
  // The multi-token-prediction head (config().mtp_layers > 0; runtime/mtp_draft.h): row t of an
  // item pairs the model's last hidden state at position start_pos + t (`hidden`, [T][dim] in batch
  // order) with the token after that position (tokens[t]), and predicts the token after that one.
  // Its attention layer reads and writes `cache` (the head's own: one attention layer). Logits go
  // where the items say; hidden_out ([T][dim], may be null) gets the head's normed output, which
  // a chained draft feeds back as the next row's hidden state.
  // head_rows > 0 (the CPU only): logits of the first head_rows ids alone, each row head_rows
  // long (drafts from the most frequent ids: a fraction of the output head's cost).
  void mtp_forward(std::span<const BatchItem> batch, KvCache& cache, const float* hidden,
                   float* hidden_out, int head_rows = 0) const;

  // What loading left out, in one line for the user ("the vision tower (333 tensors) is not
  // loaded: fak runs the language model"), or empty.
  const std::string& load_note() const { return load_note_; }

  const Device& device() const { return device_; }
  // Where a KvCache for this model keeps its slabs (KvCacheOptions::storage): host memory for the
  // CPU forward, device memory for a device's.
  std::shared_ptr<KvStorage> make_kv_storage() const;
  // A device forward allocates its working memory for batches this large now (a no-op on the CPU,
  // whose scratch is per thread and grows with the batch).
  void reserve_device_scratch(int tokens, int logit_rows) const;

 private:
  Model();
  void init_derived();
  void stretch_context(int tokens);     // LoadOptions::context_past_training
  void place_on(const Device& device);  // makes the backend; throws when it cannot

  std::filesystem::path path_;
  ModelConfig config_;
  std::shared_ptr<TensorStore> store_;
  std::shared_ptr<void> extra_storage_;  // repacked/quantised weights owned by the model
  ModelWeights weights_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Rope> rope_;
  std::unique_ptr<Rope> rope_local_;  // windowed layers' own table (Gemma 3), or null
  std::shared_ptr<const ModelIdentitySource> identity_source_;
  std::string identity_suffix_;  // "-cuda" on a device
  mutable std::once_flag identity_once_;
  mutable std::string identity_;
  std::string weights_memory_ = "mmap";
  int n_attention_layers_ = 0;
  std::vector<int> attention_index_;
  std::vector<LayerSpec> layer_specs_;  // [0]: the MTP head's layer, [l + 1]: layer l
  Device device_;
  std::unique_ptr<Backend> backend_;  // the CPU's or a device's ops (backend/backend.h)
  std::string load_note_;
};

}  // namespace fak
