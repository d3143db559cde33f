// The quantized weight types fak computes with, named as llama.cpp names them. The enum values are
// the ggml type ids written in GGUF tensor infos, so a GGUF type id converts with a cast once
// quant_type_from_ggml has said it is one of these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace fak {

enum class QuantType : uint32_t {
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ4_NL = 20,
  IQ4_XS = 23,
  MXFP4 = 39,
};
constexpr uint32_t kQuantTypeIdLimit = 40;  // every QuantType value is below this

std::span<const QuantType> all_quant_types();
std::string_view quant_type_name(QuantType t);                         // "q8_0", "q4_k", ...
std::optional<QuantType> quant_type_from_name(std::string_view name);  // case-insensitive
std::optional<QuantType> quant_type_from_ggml(uint32_t ggml_type_id);

int quant_block_size(QuantType t);      // elements per block: 32 or 256
size_t quant_block_bytes(QuantType t);  // bytes per block
// Bytes of one row of n elements; throws fak::Error unless n is a multiple of the block size.
size_t row_bytes(QuantType t, int64_t n);

// The activation format a weight type's vec_dot expects: Q8_0 for the 32-blocks (iq4_nl included),
// Q8_K for the 256-element super-blocks (the K-quants and iq4_xs), as llama.cpp's vec_dot_type.
QuantType dot_activation_type(QuantType t);

}  // namespace fak
