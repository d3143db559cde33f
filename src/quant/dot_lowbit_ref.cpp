// Scalar reference dot products of the low-bit types with quantised activations: q2_K, q3_K and
// iq4_xs against Q8_K, iq4_nl against Q8_0 (llama.cpp's vec_dot_type for each). Integer block sums
// are exact; the float steps are dot_ref.cpp's block-serial rule, which the SIMD variants and the
// matmul kernels reproduce bit for bit:
//   q2_K    acc = fma(d_a * d, float(Σ_k sc_k Σ q a), acc); acc = fma(-(d_a * dmin), Σ_k m_k
//   bsum_k)
//           (as q4_K, over 16 sub-blocks of 16)
//   q3_K    acc = fma(d_a * d, float(Σ_k sc_k Σ q a), acc)            (as q6_K)
//   iq4_xs  acc = fma(d_a * d, float(Σ_b ls_b Σ grid[q] a), acc)      (as q6_K)
//   iq4_nl  acc = fma(d_w * d_a, float(Σ grid[q] a), acc)             (as the 32-blocks)
#include <cmath>

#include "core/dtype.h"
#include "quant/kernels_internal.h"
#include "quant/quant_blocks.h"

namespace fak::quant {

namespace {

// The 2 low bits of element e of a q2_K / q3_K super-block (layout in quant_blocks.h).
inline int low2(const uint8_t* qs, int e) {
  return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

float dot_q2_k(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const BlockQ2K*>(vw);
  const auto* a = static_cast<const BlockQ8K*>(va);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int sumi = 0, summ = 0;
    for (int k = 0; k < 16; ++k) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += low2(w[i].qs, 16 * k + l) * a[i].qs[16 * k + l];
      sumi += (w[i].scales[k] & 0xF) * s;
      summ += (w[i].scales[k] >> 4) * a[i].bsums[k];
    }
    const float da = a[i].d;
    sum = std::fma(da * f16_to_f32(w[i].d), float(sumi), sum);
    sum = std::fma(-(da * f16_to_f32(w[i].dmin)), float(summ), sum);
  }
  return sum;
}

float dot_q3_k(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const BlockQ3K*>(vw);
  const auto* a = static_cast<const BlockQ8K*>(va);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int8_t sc[16];
    unpack_scales_q3_k(w[i].scales, sc);
    int sumi = 0;
    for (int k = 0; k < 16; ++k) {
      int s = 0;
      for (int l = 0; l < 16; ++l) {
        const int e = 16 * k + l;
        const int q = low2(w[i].qs, e) - ((w[i].hmask[e % 32] >> (e / 32)) & 1 ? 0 : 4);
        s += q * a[i].qs[e];
      }
      sumi += sc[k] * s;
    }
    sum = std::fma(a[i].d * f16_to_f32(w[i].d), float(sumi), sum);
  }
  return sum;
}

float dot_iq4_xs(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const BlockIq4Xs*>(vw);
  const auto* a = static_cast<const BlockQ8K*>(va);
  float sum = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int sumi = 0;
    for (int b = 0; b < 8; ++b) {
      const uint8_t* qs = w[i].qs + 16 * b;
      const int8_t* q8 = a[i].qs + 32 * b;
      int s = 0;
      for (int j = 0; j < 16; ++j)
        s += kIq4nlValues[qs[j] & 0xF] * q8[j] + kIq4nlValues[qs[j] >> 4] * q8[j + 16];
      sumi += iq4_xs_scale(w[i].scales_l, w[i].scales_h, b) * s;
    }
    sum = std::fma(a[i].d * f16_to_f32(w[i].d), float(sumi), sum);
  }
  return sum;
}

float dot_iq4_nl(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const BlockIq4Nl*>(vw);
  const auto* a = static_cast<const BlockQ8_0*>(va);
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK / 2; ++j)
      sumi += kIq4nlValues[w[i].qs[j] & 0xF] * a[i].qs[j] +
              kIq4nlValues[w[i].qs[j] >> 4] * a[i].qs[j + kQK / 2];
    sum = std::fma(f16_to_f32(w[i].d) * f16_to_f32(a[i].d), float(sumi), sum);
  }
  return sum;
}

}  // namespace

void set_lowbit_dots_ref(QuantKernels& k) {
  k.dots[uint32_t(QuantType::Q2_K)] = dot_q2_k;
  k.dots[uint32_t(QuantType::Q3_K)] = dot_q3_k;
  k.dots[uint32_t(QuantType::IQ4_XS)] = dot_iq4_xs;
  k.dots[uint32_t(QuantType::IQ4_NL)] = dot_iq4_nl;
}

}  // namespace fak::quant
