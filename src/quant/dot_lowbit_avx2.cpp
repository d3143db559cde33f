// AVX2 dot products of the low-bit types: the integer sums of lowbit_avx2.h (iq4_nl: dot_i8 over
// its grid codes) reduced per block, then dot_lowbit_ref.cpp's float steps, so the results are the
// scalar reference's bits.
#include <immintrin.h>

#include <cmath>

#include "quant/avx2_common.h"
#include "quant/kernels_internal.h"
#include "quant/lowbit_avx2.h"
#include "quant/quant_blocks.h"

namespace fak::quant {

namespace {

float dot_q2_k(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const BlockQ2K*>(vw);
  const auto* a = static_cast<const BlockQ8K*>(va);
  float acc = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    __m256i mins;
    const int sumi = hsum_i32(q2_k_sums(w[i], a[i], &mins));
    const float da = a[i].d;
    acc = std::fma(da * h2f(w[i].d), float(sumi), acc);
    acc = std::fma(-(da * h2f(w[i].dmin)), float(hsum_i32(mins)), acc);
  }
  return acc;
}

float dot_q3_k(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const BlockQ3K*>(vw);
  const auto* a = static_cast<const BlockQ8K*>(va);
  float acc = 0;
  for (int64_t i = 0; i < n / kQKK; ++i)
    acc = std::fma(a[i].d * h2f(w[i].d), float(hsum_i32(q3_k_sums(w[i], a[i]))), acc);
  return acc;
}

float dot_iq4_xs(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const BlockIq4Xs*>(vw);
  const auto* a = static_cast<const BlockQ8K*>(va);
  float acc = 0;
  for (int64_t i = 0; i < n / kQKK; ++i)
    acc = std::fma(a[i].d * h2f(w[i].d), float(hsum_i32(iq4_xs_sums(w[i], a[i]))), acc);
  return acc;
}

float dot_iq4_nl(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const BlockIq4Nl*>(vw);
  const auto* a = static_cast<const BlockQ8_0*>(va);
  float acc = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const int isum = hsum_i32(dot_i8(codes_iq4(w[i].qs), load256(a[i].qs)));
    acc = std::fma(h2f(w[i].d) * h2f(a[i].d), float(isum), acc);
  }
  return acc;
}

}  // namespace

void set_lowbit_dots_avx2(QuantKernels& k) {
  k.dots[uint32_t(QuantType::Q2_K)] = dot_q2_k;
  k.dots[uint32_t(QuantType::Q3_K)] = dot_q3_k;
  k.dots[uint32_t(QuantType::IQ4_XS)] = dot_iq4_xs;
  k.dots[uint32_t(QuantType::IQ4_NL)] = dot_iq4_nl;
}

}  // namespace fak::quant
