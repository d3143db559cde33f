// libFuzzer target for loading a model from a GGUF file (Model::load): the container is fuzzed by
// gguf_fuzz; this one goes through what sits on top of it, the metadata -> config rules, tensor
// names, shapes and types, the qwen35 and llama row reorderings and the tokenizer from
// tokenizer.ggml.*. Any bytes must load or throw fak::Error; a model that loads runs a prefill
// and one decode step, so ASan sees the weights it vouched for being read.
//
// The first byte picks whether the tokenizer is loaded and whether the file is mapped or read.
// Seeds: tiny oracle models converted by `fak convert` (with the bundled model's 8k-token
// tokenizer; llama-spm-vocab-q4_0 with the SentencePiece fixture's, a 'llama' vocabulary with
// scores), in fuzz/corpus/gguf_model.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "memory/kv_cache.h"
#include "models/model.h"
#include "runtime/session.h"
#include "scratch_path.h"

namespace {

const std::filesystem::path& scratch_file() {
  static const fuzz::ScratchPath p("fak_gguf_model_fuzz", ".gguf");
  return p.path();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  fak::LoadOptions options;
  options.load_tokenizer = data[0] & 1;
  options.mmap = data[0] & 2;
  if (FILE* f = std::fopen(scratch_file().c_str(), "wb")) {
    const bool ok = std::fwrite(data + 1, 1, size - 1, f) == size - 1;
    std::fclose(f);
    if (!ok) __builtin_trap();
  }
  try {
    const auto model = fak::Model::load(scratch_file(), options);
    const fak::ModelConfig& c = model->config();
    auto cache = std::make_shared<fak::KvCache>(model->n_attention_layers(), c.n_kv_heads,
                                                c.head_dim, fak::KvCacheOptions{});
    fak::Session s(model, cache);
    const int32_t a = 1 % c.vocab, b = 2 % c.vocab;
    s.append(std::vector<int32_t>{a, b});
    s.append(std::vector<int32_t>{a});
  } catch (const fak::Error&) {
  }
  return 0;
}
