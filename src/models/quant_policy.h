// Which stored type each weight matrix gets when a model is quantised (fak convert / quantize,
// --quant at load), following llama.cpp's llama_tensor_get_type so files read like its own: e.g.
// Q4_K_M keeps the output matrix and half the attn_v / ffn_down layers in Q6_K, and rows whose
// length is no multiple of 256 fall back to Q5_0 / Q8_0 (llama.cpp's "incompatible tensor" rule).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ops/matmul.h"

namespace fak {

// The file types fak writes, with llama.cpp's general.file_type values (enum llama_ftype).
enum class FileType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q8_0 = 7,
  Q5_0 = 8,
  Q5_1 = 9,
  Q2_K = 10,    // llama-quantize's Q2_K mix: Q2_K, with Q3_K / Q4_K where it matters more
  Q3_K_M = 12,  // Q3_K, with Q4_K / Q5_K where it matters more
  Q4_K_M = 15,
  Q5_K_M = 17,
  Q6_K = 18,
  IQ4_NL = 25,
  IQ4_XS = 30,
  BF16 = 32,
  MXFP4_MOE = 38,  // the experts in MXFP4, every other matrix Q8_0 (gpt-oss as released)
};

FileType parse_file_type(std::string_view name);  // "f16", "q4_k_m", ...; throws listing choices
std::string file_type_name(FileType t);

// The type of one matrix of shape [rows, cols] (cols contiguous), by its llama-quantize role (the
// GGUF base name: "attn_v", "ffn_down_exps", "output", ...; tensor_table.h). `tied` says the model
// has no output matrix, so token_embd is used as the output and gets the output's type (as
// llama.cpp). `n_experts` matters where llama.cpp has rules for 8-expert models, `n_gqa` (query
// heads per key/value head) for the attn_v of the Q2_K and IQ4 mixes.
WType choose_wtype(FileType ft, std::string_view role, int layer, int n_layers, int64_t cols,
                   bool tied, int n_experts = 0, int n_gqa = 1);

// Converts a matrix to `type`, row by row through f32 (multithreaded). Rows must fit the type's
// block size.
std::vector<uint8_t> convert_matrix(const WeightMatrix& src, WType type);

}  // namespace fak
