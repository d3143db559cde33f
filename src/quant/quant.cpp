// Row quantize / dequantize by type, and the one-time choice of dot-product kernels by CPU.
#include "quant/quant.h"

#include <string>

#include "core/cpu_features.h"
#include "core/error.h"
#include "quant/kernels_internal.h"

namespace fak {

using namespace quant;

void quantize_row(QuantType t, const float* x, void* y, int64_t n) {
  row_bytes(t, n);  // validates n
  switch (t) {
    case QuantType::Q4_0:
      return quantize_q4_0_ref(x, y, n);
    case QuantType::Q4_1:
      return quantize_q4_1_ref(x, y, n);
    case QuantType::Q5_0:
      return quantize_q5_0_ref(x, y, n);
    case QuantType::Q5_1:
      return quantize_q5_1_ref(x, y, n);
    case QuantType::Q8_0:
      return quant_kernels().quantize_q8_0(x, y, n);
    case QuantType::Q4_K:
      return quantize_q4_k(x, y, n, quant_kernels().fit_k4);
    case QuantType::Q5_K:
      return quantize_q5_k(x, y, n, quant_kernels().fit_k4);
    case QuantType::Q6_K:
      return quantize_q6_k(x, y, n, quant_kernels().fit_q6_k);
    case QuantType::Q8_K:
      return quant_kernels().quantize_q8_k(x, y, n);
    case QuantType::MXFP4:
      return quantize_mxfp4_ref(x, y, n);
    case QuantType::Q2_K:
      return quantize_q2_k_ref(x, y, n);
    case QuantType::Q3_K:
      return quantize_q3_k_ref(x, y, n);
    case QuantType::IQ4_NL:
      return quantize_iq4_nl_ref(x, y, n);
    case QuantType::IQ4_XS:
      return quantize_iq4_xs_ref(x, y, n);
  }
  fail("quantize_row: unknown quant type " + std::to_string(uint32_t(t)));
}

void dequantize_row(QuantType t, const void* x, float* y, int64_t n) {
  row_bytes(t, n);
  switch (t) {
    case QuantType::Q4_0:
      return dequantize_q4_0_ref(x, y, n);
    case QuantType::Q4_1:
      return dequantize_q4_1_ref(x, y, n);
    case QuantType::Q5_0:
      return dequantize_q5_0_ref(x, y, n);
    case QuantType::Q5_1:
      return dequantize_q5_1_ref(x, y, n);
    case QuantType::Q8_0:
      return dequantize_q8_0_ref(x, y, n);
    case QuantType::Q4_K:
      return dequantize_q4_k_ref(x, y, n);
    case QuantType::Q5_K:
      return dequantize_q5_k_ref(x, y, n);
    case QuantType::Q6_K:
      return dequantize_q6_k_ref(x, y, n);
    case QuantType::Q8_K:
      return dequantize_q8_k_ref(x, y, n);
    case QuantType::MXFP4:
      return dequantize_mxfp4_ref(x, y, n);
    case QuantType::Q2_K:
      return dequantize_q2_k_ref(x, y, n);
    case QuantType::Q3_K:
      return dequantize_q3_k_ref(x, y, n);
    case QuantType::IQ4_NL:
      return dequantize_iq4_nl_ref(x, y, n);
    case QuantType::IQ4_XS:
      return dequantize_iq4_xs_ref(x, y, n);
  }
  fail("dequantize_row: unknown quant type " + std::to_string(uint32_t(t)));
}

namespace {

bool cpu_has_avx2() {
  return cpu_features().avx2;
}

}  // namespace

std::span<const QuantKernelVariant> quant_kernel_variants() {
  static const QuantKernelVariant variants[] = {
      {&scalar_kernels(), true},
      {&avx2_kernels(), cpu_has_avx2()},
  };
  return variants;
}

const QuantKernels& quant_kernels() {
  static const QuantKernels& best = []() -> const QuantKernels& {
    const QuantKernels* pick = &scalar_kernels();
    for (const QuantKernelVariant& v : quant_kernel_variants())
      if (v.supported) pick = v.kernels;  // variants are listed slowest first
    return *pick;
  }();
  return best;
}

}  // namespace fak
