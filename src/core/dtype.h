// Element types of tensors in model files and caches, and the scalar conversions between them.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace fak {

// Q8_0 (KV rows only): ggml's blocks of 32, an f16 scale and 32 int8 codes; no size per element.
enum class DType : uint8_t { F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL, Q8_0 };

std::string_view dtype_name(DType t);
size_t dtype_size(DType t);  // bytes per element (0 for Q8_0: use dtype_row_bytes)
// Bytes of n elements (for Q8_0, n a multiple of 32).
size_t dtype_row_bytes(DType t, int64_t n);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace fak
