// Scalar reference matmul for float weight types: the readable spec the SIMD kernels are tested
// against. One sequential sum per output element (deterministic).
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/matmul_kernels.h"

namespace fak::kernels {

namespace {

inline float load_weight(WType type, const uint8_t* row, int64_t k) {
  switch (type) {
    case WType::F32: {
      float v;
      std::memcpy(&v, row + 4 * k, 4);
      return v;
    }
    case WType::BF16: {
      uint16_t h;
      std::memcpy(&h, row + 2 * k, 2);
      return bf16_to_f32(h);
    }
    case WType::F16: {
      uint16_t h;
      std::memcpy(&h, row + 2 * k, 2);
      return f16_to_f32(h);
    }
    default: fail("matmul_ref: weight type " + std::string(wtype_name(type)) + " not handled here");
  }
}

}  // namespace

void matmul_rows_ref(const WeightMatrix& w, const float* x, int n_tokens, float* y, int64_t r0,
                     int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w.row(r);
    for (int t = 0; t < n_tokens; ++t) {
      const float* xt = x + size_t(t) * size_t(w.cols);
      float acc = 0.0f;
      for (int64_t k = 0; k < w.cols; ++k) acc += load_weight(w.type, row, k) * xt[k];
      y[size_t(t) * size_t(w.rows) + size_t(r)] = acc;
    }
  }
}

}  // namespace fak::kernels
