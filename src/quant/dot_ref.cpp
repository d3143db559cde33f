// Scalar reference dot products of one weight row with one quantized activation row. Integer parts
// are summed exactly per block.
//
// note: for every weight type the float combination is the "block-serial" rule every SIMD variant
// and tile kernel reproduces bit for bit: one fused multiply-add per block (two for the types with
// mins) into a single accumulator, blocks in order, starting from +0:
//   acc = fma(d_w * d_a, float(isum_b), acc)            [q6_K, the 32-blocks]
//   acc = fma(m_w * d_a, float(asum_b), acc)            [then this too for q4_1 / q5_1]
//   acc = fma(-(d_a * dmin_w), float(imin_b), acc)      [then this too for q4_K / q5_K]
// (asum_b: the block's activation quants summed.) Because the integer block sums are exact and
// the float steps are fixed per output, any kernel may compute several rows or tokens at once
// (rows in SIMD lanes) and still give these bits. q8_K (activations only) keeps a plain sum. The
// low-bit types follow the same rule (dot_lowbit_ref.cpp): q2_K as q4_K, q3_K and iq4_xs as q6_K,
// iq4_nl as the 32-blocks.
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "quant/kernels_internal.h"
#include "quant/quant_blocks.h"

namespace fak::quant {

namespace {

inline uint32_t load_qh(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

int sum_q8(const int8_t* q) {
  int s = 0;
  for (int j = 0; j < kQK; ++j) s += q[j];
  return s;
}

float dot_q8_0(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const BlockQ8_0*>(vw);
  const auto* a = static_cast<const BlockQ8_0*>(va);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += w[i].qs[j] * a[i].qs[j];
    sum = std::fma(f16_to_f32(w[i].d) * f16_to_f32(a[i].d), float(sumi), sum);
  }
  return sum;
}

float dot_q4_0(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const BlockQ4_0*>(vw);
  const auto* a = static_cast<const BlockQ8_0*>(va);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += ((w[i].qs[j] & 0xF) - 8) * a[i].qs[j];
      sumi += ((w[i].qs[j] >> 4) - 8) * a[i].qs[j + kQK / 2];
    }
    sum = std::fma(f16_to_f32(w[i].d) * f16_to_f32(a[i].d), float(sumi), sum);
  }
  return sum;
}

// MXFP4: the doubled E2M1 values are exact int8, the halved shared exponent the weight's scale.
float dot_mxfp4(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const BlockMxfp4*>(vw);
  const auto* a = static_cast<const BlockQ8_0*>(va);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += kMxfp4Values[w[i].qs[j] & 0xF] * a[i].qs[j];
      sumi += kMxfp4Values[w[i].qs[j] >> 4] * a[i].qs[j + kQK / 2];
    }
    sum = std::fma(e8m0_half(w[i].e) * f16_to_f32(a[i].d), float(sumi), sum);
  }
  return sum;
}

// The min term m * Σ a needs the activation sum, recomputed from the quants: Q8_0 carries none.
float dot_q4_1(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const BlockQ4_1*>(vw);
  const auto* a = static_cast<const BlockQ8_0*>(va);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      sumi += (w[i].qs[j] & 0xF) * a[i].qs[j];
      sumi += (w[i].qs[j] >> 4) * a[i].qs[j + kQK / 2];
    }
    const float da = f16_to_f32(a[i].d);
    sum = std::fma(f16_to_f32(w[i].d) * da, float(sumi), sum);
    sum = std::fma(f16_to_f32(w[i].m) * da, float(sum_q8(a[i].qs)), sum);
  }
  return sum;
}

float dot_q5_0(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const BlockQ5_0*>(vw);
  const auto* a = static_cast<const BlockQ8_0*>(va);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const uint32_t qh = load_qh(w[i].qh);
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = ((w[i].qs[j] & 0xF) | int(((qh >> j) & 1) << 4)) - 16;
      const int q1 = ((w[i].qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4)) - 16;
      sumi += q0 * a[i].qs[j] + q1 * a[i].qs[j + kQK / 2];
    }
    sum = std::fma(f16_to_f32(w[i].d) * f16_to_f32(a[i].d), float(sumi), sum);
  }
  return sum;
}

float dot_q5_1(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const BlockQ5_1*>(vw);
  const auto* a = static_cast<const BlockQ8_0*>(va);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const uint32_t qh = load_qh(w[i].qh);
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = (w[i].qs[j] & 0xF) | int(((qh >> j) & 1) << 4);
      const int q1 = (w[i].qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
      sumi += q0 * a[i].qs[j] + q1 * a[i].qs[j + kQK / 2];
    }
    const float da = f16_to_f32(a[i].d);
    sum = std::fma(f16_to_f32(w[i].d) * da, float(sumi), sum);
    sum = std::fma(f16_to_f32(w[i].m) * da, float(sum_q8(a[i].qs)), sum);
  }
  return sum;
}

// q4_K / q5_K: Σ_j (d sc_j q - dmin m_j) a = d Σ_j sc_j Σ q a - dmin Σ_j m_j Σ a, where Σ a over a
// 32-element sub-block is two of the activation's 16-element bsums.
template <bool kFiveBit, typename Block>
float dot_k4(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const Block*>(vw);
  const auto* a = static_cast<const BlockQ8K*>(va);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint8_t sc[8], m[8];
    unpack_scales_k4(w[i].scales, sc, m);
    int sumi = 0, summ = 0;
    for (int c = 0; c < 4; ++c) {
      int lo = 0, hi = 0;
      for (int l = 0; l < 32; ++l) {
        int q0 = w[i].qs[32 * c + l] & 0xF, q1 = w[i].qs[32 * c + l] >> 4;
        if constexpr (kFiveBit) {
          q0 |= ((w[i].qh[l] >> (2 * c)) & 1) << 4;
          q1 |= ((w[i].qh[l] >> (2 * c + 1)) & 1) << 4;
        }
        lo += q0 * a[i].qs[64 * c + l];
        hi += q1 * a[i].qs[64 * c + 32 + l];
      }
      sumi += sc[2 * c] * lo + sc[2 * c + 1] * hi;
    }
    for (int j = 0; j < 8; ++j) summ += m[j] * (a[i].bsums[2 * j] + a[i].bsums[2 * j + 1]);
    const float da = a[i].d;
    sum = std::fma(da * f16_to_f32(w[i].d), float(sumi), sum);
    sum = std::fma(-(da * f16_to_f32(w[i].dmin)), float(summ), sum);
  }
  return sum;
}

float dot_q6_k(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const BlockQ6K*>(vw);
  const auto* a = static_cast<const BlockQ8K*>(va);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int sumi = 0;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = w[i].ql + 64 * h;
      const uint8_t* qh = w[i].qh + 32 * h;
      const int8_t* q8 = a[i].qs + 128 * h;
      int sub[8] = {};  // per 16-element sub-block of this half
      for (int l = 0; l < 32; ++l) {
        const int k = l / 16;
        sub[k] += (((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32) * q8[l];
        sub[k + 2] += (((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32) * q8[l + 32];
        sub[k + 4] += (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32) * q8[l + 64];
        sub[k + 6] += (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32) * q8[l + 96];
      }
      for (int k = 0; k < 8; ++k) sumi += w[i].scales[8 * h + k] * sub[k];
    }
    sum = std::fma(a[i].d * f16_to_f32(w[i].d), float(sumi), sum);
  }
  return sum;
}

float dot_q8_k(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const BlockQ8K*>(vw);
  const auto* a = static_cast<const BlockQ8K*>(va);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQKK; ++j) sumi += w[i].qs[j] * a[i].qs[j];
    sum += w[i].d * a[i].d * float(sumi);
  }
  return sum;
}

QuantKernels make_scalar() {
  QuantKernels k{};
  k.isa = "scalar";
  k.dots[uint32_t(QuantType::Q4_0)] = dot_q4_0;
  k.dots[uint32_t(QuantType::Q4_1)] = dot_q4_1;
  k.dots[uint32_t(QuantType::Q5_0)] = dot_q5_0;
  k.dots[uint32_t(QuantType::Q5_1)] = dot_q5_1;
  k.dots[uint32_t(QuantType::Q8_0)] = dot_q8_0;
  k.dots[uint32_t(QuantType::Q4_K)] = dot_k4<false, BlockQ4K>;
  k.dots[uint32_t(QuantType::Q5_K)] = dot_k4<true, BlockQ5K>;
  k.dots[uint32_t(QuantType::Q6_K)] = dot_q6_k;
  k.dots[uint32_t(QuantType::Q8_K)] = dot_q8_k;
  k.dots[uint32_t(QuantType::MXFP4)] = dot_mxfp4;
  set_lowbit_dots_ref(k);
  k.quantize_q8_0 = quantize_q8_0_ref;
  k.quantize_q8_k = quantize_q8_k_ref;
  k.fit_k4 = fit_k4_super_block_ref;
  k.fit_q6_k = fit_q6_k_scales_ref;
  return k;
}

}  // namespace

const QuantKernels& scalar_kernels() {
  static const QuantKernels k = make_scalar();
  return k;
}

}  // namespace fak::quant
