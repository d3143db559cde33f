// A random-weight GGUF of a real shape, written tensor by tensor straight into the file type's
// per-tensor types (llama-quantize's rules, as fak convert writes them): a full-depth 30B MoE at
// Q4_K_M is made without its 61 GB F16 intermediate, for benchmarks at full size (fak synth
// --gguf).
#pragma once

#include <cstdint>
#include <filesystem>

#include "models/config.h"
#include "models/gguf_export.h"
#include "tokenizer/tokenizer.h"

namespace fak {

// Every tensor of `c`'s table: norm scales the identity, dt_bias ones, every other value
// normal(0, sigma) from `seed` (A_log through -exp, as the file stores it), each matrix stored as
// gguf_tensor_type() says. Peak memory: a few rows of the widest matrix per thread.
ExportStats synth_gguf(const ModelConfig& c, const TokenizerSpec& tokenizer, FileType type,
                       uint64_t seed, float sigma, const std::filesystem::path& out);

}  // namespace fak
