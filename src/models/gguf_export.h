// Writing GGUF files llama.cpp can load: `fak convert` (a Hugging Face model -> GGUF of a chosen
// type) and `fak quantize` (GGUF -> GGUF of another type). Follows llama.cpp's converter: its
// tensor names and metadata keys, 1-D tensors in F32, llama q/k rows permuted for its interleaved
// RoPE, the tokenizer as tokenizer.ggml.*, and llama-quantize's per-tensor type rules
// (quant_policy.h).
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/quant_policy.h"
#include "models/tensor_table.h"

namespace fak {

class GgufWriter;

struct ExportStats {
  size_t tensors = 0;
  size_t bytes = 0;                  // tensor data bytes written
  std::map<std::string, int> types;  // stored type name -> tensor count
  std::string summary() const;       // "12 tensors, 3.1 MiB (f32:5 q8_0:7)"
  // What a reader other than fak will not honour (llama.cpp's qwen3moe always renormalises the
  // routing weights, and knows no dense layers between sparse ones), one sentence each.
  std::vector<std::string> warnings;
};

// `model` must have been loaded from a Hugging Face directory (its weights are read from there).
ExportStats export_gguf(const Model& model, FileType type, const std::filesystem::path& out);

// The keys every llama.cpp architecture has (general.*, sizes, RoPE, norms) and the family's own.
void write_gguf_config(GgufWriter& w, const ModelConfig& c, FileType type, const std::string& name);
// The type a tensor is stored as in a `type` file: llama-quantize's rules (quant_policy.h), F32 for
// the tensors llama.cpp's converter keeps in float.
WType gguf_tensor_type(const ModelConfig& c, FileType type, const TensorDef& d, int64_t cols);

ExportStats requantize_gguf(const std::filesystem::path& in, const std::filesystem::path& out,
                            FileType type);

}  // namespace fak
