// Loading a model from a llama.cpp GGUF file: metadata -> ModelConfig, tensors -> ModelWeights
// (quantised matrices stay quantised, used in place), the embedded vocabulary -> TokenizerSpec.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "io/gguf.h"
#include "models/config.h"
#include "models/weights.h"
#include "tokenizer/tokenizer.h"

namespace fak {

struct GgufModel {
  ModelConfig config;
  ModelWeights weights;
  std::shared_ptr<void> storage;  // the file's bytes (map or anonymous copy) and repacked rows
  std::optional<TokenizerSpec> tokenizer;
  std::string memory;  // "mmap" or "anonymous" (read into memory, huge pages advised)
};

// use_mmap: map the file (instant start, pages fault in on first use) or read it into anonymous
// memory with MADV_HUGEPAGE (a full read at start, fewer TLB misses afterwards).
// pack_panels: rewrite quantised matrices into the CPU kernel's panels (read-in files only); a
// device forward reads the rows as stored, so it loads without.
GgufModel load_gguf_model(const std::filesystem::path& path, bool use_mmap, bool load_tokenizer,
                          bool pack_panels = true);

// Metadata -> config for llama, qwen2, qwen3 and qwen35 (the Qwen3.5 hybrid); throws for any
// other general.architecture. Tensor presence decides biases, q/k norms and tied embeddings.
ModelConfig gguf_model_config(const GgufFile& file);

// ggml type id -> the WType fak computes with; nullopt for types it cannot (q2_K, iq*, ...).
std::optional<WType> wtype_from_ggml(uint32_t ggml_type);
uint32_t ggml_type_of(WType t);

// llama.cpp's converter reorders each llama q/k head's rows from HF's rotate-half layout to
// interleaved pairs: GGUF row 2i + s of a head is HF row s * head_dim / 2 + i. These give the HF
// row for a GGUF row and the GGUF row for an HF row.
int64_t llama_unpermuted_row(int64_t gguf_row, int head_dim);
int64_t llama_permuted_row(int64_t hf_row, int head_dim);

}  // namespace fak
