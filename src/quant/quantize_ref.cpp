// Scalar quantize / dequantize of the 32-element block types (q4_0, q4_1, q5_0, q5_1, q8_0, mxfp4)
// and of q8_K, the activation format of the K-quant dots. These are the spec the SIMD variants
// match.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "quant/kernels_internal.h"
#include "quant/quant_blocks.h"

namespace fak::quant {

namespace {

// The element with the largest magnitude, sign kept: the symmetric formats map it to the most
// negative code (-8 / -16), which uses the one extra negative level of their ranges.
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void min_max(const float* x, int n, float* lo, float* hi) {
  *lo = x[0];
  *hi = x[0];
  for (int j = 1; j < n; ++j) {
    *lo = std::min(*lo, x[j]);
    *hi = std::max(*hi, x[j]);
  }
}

// note: the q8 activation quantizers round ties to even (the default FP mode; rint, which compiles
// inline where nearbyint is a libm call) and compute id = 1/d once per block so the AVX2 versions
// (_mm256_round_ps nearest) give the exact same bytes; ggml's reference uses roundf, which only
// differs on exact .5 ties. A block whose largest magnitude is under ~3.7e-37 has d subnormal and
// id = 1/d infinite: its quants are then +-127, and 0 where x is 0 (0 * inf is NaN, taken as 0).
inline int8_t round_q8(float v) {
  if (std::isnan(v)) return 0;
  return int8_t(std::clamp(std::rint(v), -127.0f, 127.0f));
}

}  // namespace

void quantize_q4_0_ref(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ4_0*>(vy);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const float d = signed_absmax(x, kQK) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_0 b;
    b.d = f32_to_f16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      // x*id lies in [-8, 8]; +8.5 then truncation rounds to the nearest code, clamped to 15.
      const int lo = std::min(15, int(x[j] * id + 8.5f));
      const int hi = std::min(15, int(x[j + kQK / 2] * id + 8.5f));
      b.qs[j] = uint8_t(lo | (hi << 4));
    }
    std::memcpy(&y[i], &b, sizeof b);
  }
}

void quantize_q4_1_ref(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ4_1*>(vy);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float lo, hi;
    min_max(x, kQK, &lo, &hi);
    const float d = (hi - lo) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_1 b;
    b.d = f32_to_f16(d);
    b.m = f32_to_f16(lo);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(15, int((x[j] - lo) * id + 0.5f));
      const int q1 = std::min(15, int((x[j + kQK / 2] - lo) * id + 0.5f));
      b.qs[j] = uint8_t(q0 | (q1 << 4));
    }
    std::memcpy(&y[i], &b, sizeof b);
  }
}

void quantize_q5_0_ref(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ5_0*>(vy);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const float d = signed_absmax(x, kQK) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ5_0 b;
    b.d = f32_to_f16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(31, int(x[j] * id + 16.5f));
      const int q1 = std::min(31, int(x[j + kQK / 2] * id + 16.5f));
      b.qs[j] = uint8_t((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= uint32_t(q0 >> 4) << j;
      qh |= uint32_t(q1 >> 4) << (j + kQK / 2);
    }
    std::memcpy(b.qh, &qh, 4);  // little-endian, as ggml reads it
    std::memcpy(&y[i], &b, sizeof b);
  }
}

void quantize_q5_1_ref(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ5_1*>(vy);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float lo, hi;
    min_max(x, kQK, &lo, &hi);
    const float d = (hi - lo) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ5_1 b;
    b.d = f32_to_f16(d);
    b.m = f32_to_f16(lo);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = std::min(31, int((x[j] - lo) * id + 0.5f));
      const int q1 = std::min(31, int((x[j + kQK / 2] - lo) * id + 0.5f));
      b.qs[j] = uint8_t((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= uint32_t(q0 >> 4) << j;
      qh |= uint32_t(q1 >> 4) << (j + kQK / 2);
    }
    std::memcpy(b.qh, &qh, 4);
    std::memcpy(&y[i], &b, sizeof b);
  }
}

void quantize_q8_0_ref(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(vy);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_0 b;
    b.d = f32_to_f16(d);
    for (int j = 0; j < kQK; ++j) b.qs[j] = round_q8(x[j] * id);
    std::memcpy(&y[i], &b, sizeof b);
  }
}

void quantize_q8_k_ref(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockQ8K*>(vy);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    float amax = 0.0f;
    for (int j = 0; j < kQKK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8K b;
    b.d = d;
    for (int j = 0; j < kQKK; ++j) b.qs[j] = round_q8(x[j] * id);
    for (int g = 0; g < kQKK / 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += b.qs[16 * g + l];
      b.bsums[g] = int16_t(sum);
    }
    for (int k = 0; k < kQKK / 32; ++k) b.sums32[k] = int16_t(b.bsums[2 * k] + b.bsums[2 * k + 1]);
    std::memcpy(&y[i], &b, sizeof b);
  }
}

void dequantize_q4_0_ref(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(vx);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float((x[i].qs[j] & 0xF) - 8) * d;
      y[j + kQK / 2] = float((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_1_ref(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(vx);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d), m = f16_to_f32(x[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float(x[i].qs[j] & 0xF) * d + m;
      y[j + kQK / 2] = float(x[i].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_q5_0_ref(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(vx);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = (x[i].qs[j] & 0xF) | int(((qh >> j) & 1) << 4);
      const int q1 = (x[i].qs[j] >> 4) | int(((qh >> (j + kQK / 2)) & 1) << 4);
      y[j] = float(q0 - 16) * d;
      y[j + kQK / 2] = float(q1 - 16) * d;
    }
  }
}

void dequantize_q5_1_ref(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(vx);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d), m = f16_to_f32(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = (x[i].qs[j] & 0xF) | int(((qh >> j) & 1) << 4);
      const int q1 = (x[i].qs[j] >> 4) | int(((qh >> (j + kQK / 2)) & 1) << 4);
      y[j] = float(q0) * d + m;
      y[j + kQK / 2] = float(q1) * d + m;
    }
  }
}

void dequantize_q8_0_ref(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(vx);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = float(x[i].qs[j]) * d;
  }
}

// As ggml's quantize_row_mxfp4_ref (llama-quantize writes these bytes): the shared exponent puts
// the block's largest magnitude in [8, 16) times the halved scale, and each element takes the
// nearest of the 16 doubled values (the first on a tie). The exponent is clamped to E8M0's finite
// range (0..254), where ggml would wrap for magnitudes below 2^-125 or above 2^128.
void quantize_mxfp4_ref(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<BlockMxfp4*>(vy);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float exponent = amax > 0.0f ? std::floor(std::log2(amax)) - 2 + 127 : 0.0f;
    BlockMxfp4 b;
    b.e = uint8_t(std::clamp(exponent, 0.0f, 254.0f));
    const float d = e8m0_half(b.e);
    auto nearest = [&](float v) {
      int best = 0;
      float best_err = std::fabs(float(kMxfp4Values[0]) * d - v);
      for (int k = 1; k < 16; ++k) {
        const float err = std::fabs(float(kMxfp4Values[k]) * d - v);
        if (err < best_err) {
          best = k;
          best_err = err;
        }
      }
      return best;
    };
    for (int j = 0; j < kQK / 2; ++j)
      b.qs[j] = uint8_t(nearest(x[j]) | (nearest(x[j + kQK / 2]) << 4));
    std::memcpy(&y[i], &b, sizeof b);
  }
}

void dequantize_mxfp4_ref(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockMxfp4*>(vx);
  for (int64_t i = 0; i < n / kQK; ++i, y += kQK) {
    const float d = e8m0_half(x[i].e);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float(kMxfp4Values[x[i].qs[j] & 0xF]) * d;
      y[j + kQK / 2] = float(kMxfp4Values[x[i].qs[j] >> 4]) * d;
    }
  }
}

void dequantize_q8_k_ref(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8K*>(vx);
  for (int64_t i = 0; i < n / kQKK; ++i, y += kQKK) {
    float d;
    std::memcpy(&d, &x[i].d, 4);  // rows need not be 4-byte aligned
    for (int j = 0; j < kQKK; ++j) y[j] = float(x[i].qs[j]) * d;
  }
}

}  // namespace fak::quant
