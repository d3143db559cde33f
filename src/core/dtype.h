// Element types of tensors in model files and caches, and the scalar conversions between them.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace fak {

// Q8_0 and Q4_0 (KV rows only): ggml's blocks of 32, an f16 scale and 32 int8 codes (Q8_0) or 32
// 4-bit codes (Q4_0, element j in the low nibble of byte j, element j + 16 in its high nibble);
// no size per element.
enum class DType : uint8_t { F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL, Q8_0, Q4_0 };

std::string_view dtype_name(DType t);
size_t dtype_size(DType t);  // bytes per element (0 for Q8_0 and Q4_0: use dtype_row_bytes)
// Bytes of n elements (for Q8_0 and Q4_0, n a multiple of 32).
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

// Whether t is stored in blocks of 32 with a scale (Q8_0, Q4_0).
inline bool dtype_blocked(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0;
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// n elements narrowed as f32_to_f16 / f32_to_bf16 do, to the bit (NaNs included), eight at a time
// where the CPU has AVX2 and F16C: KV cache rows as they are stored (one element at a time they
// were 1.3% of a prefill).
void f32_to_f16_row(const float* x, int n, uint16_t* out);
void f32_to_bf16_row(const float* x, int n, uint16_t* out);
void f32_to_f16_row_avx2(const float* x, int n, uint16_t* out);   // dtype_avx2.cpp
void f32_to_bf16_row_avx2(const float* x, int n, uint16_t* out);  // (AVX2 + F16C only)

}  // namespace fak
