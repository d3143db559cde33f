#include "core/dtype.h"

#include "core/cpu_features.h"

namespace fak {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
    case DType::F64:
      return "F64";
    case DType::I64:
      return "I64";
    case DType::I32:
      return "I32";
    case DType::I16:
      return "I16";
    case DType::I8:
      return "I8";
    case DType::U8:
      return "U8";
    case DType::BOOL:
      return "BOOL";
    case DType::Q8_0:
      return "Q8_0";
    case DType::Q4_0:
      return "Q4_0";
  }
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64:
    case DType::I64:
      return 8;
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::F16:
    case DType::BF16:
    case DType::I16:
      return 2;
    case DType::I8:
    case DType::U8:
    case DType::BOOL:
      return 1;
    case DType::Q8_0:
    case DType::Q4_0:
      return 0;
  }
  return 0;
}

size_t dtype_row_bytes(DType t, int64_t n) {
  if (t == DType::Q8_0) return size_t(n / 32) * 34;
  if (t == DType::Q4_0) return size_t(n / 32) * 18;
  return size_t(n) * dtype_size(t);
}

// IEEE half <-> single, bit-exact (subnormals, inf, NaN), round to nearest even.
float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {                                  // subnormal or zero in half
    if (abs < 0x33000000u) return uint16_t(sign);
    uint32_t e = abs >> 23;
    uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // half subnormal unit is 2^-24
    uint32_t result = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (result & 1u))) ++result;
    return uint16_t(sign | result);
  }
  uint32_t result = ((abs >> 13) - (112u << 10));
  uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (result & 1u))) ++result;
  return uint16_t(sign | result);
}

void f32_to_f16_row(const float* x, int n, uint16_t* out) {
  if (cpu_features().avx2) return f32_to_f16_row_avx2(x, n, out);
  for (int i = 0; i < n; ++i) out[i] = f32_to_f16(x[i]);
}

void f32_to_bf16_row(const float* x, int n, uint16_t* out) {
  if (cpu_features().avx2) return f32_to_bf16_row_avx2(x, n, out);
  for (int i = 0; i < n; ++i) out[i] = f32_to_bf16(x[i]);
}

}  // namespace fak
