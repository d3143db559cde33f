// Matrix multiplication against weight matrices in any stored type: y[t][r] = dot(x[t], W[r]).
//
// note: every output element is computed by the same sequence of floating-point operations no
// matter how many tokens are in the batch or how the work is tiled across threads. That is what
// makes prefill == decode, batched == alone and cache-hit == cold prefill hold bit for bit; a
// kernel that breaks it (e.g. a k-split reduction that depends on the batch size) breaks the
// reuse stack's guarantees.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "quant/quant_type.h"

namespace fak {

// How a weight matrix is stored. Float types are widened to f32 inside the kernels.
enum class WType : uint8_t {
  F32,
  F16,
  BF16,
  Q8_0,
  Q4_0,
  Q4_1,
  Q5_0,
  Q5_1,
  Q4_K,
  Q5_K,
  Q6_K,
  MXFP4,
  Q2_K,
  Q3_K,
  IQ4_NL,
  IQ4_XS,
};

std::string_view wtype_name(WType t);
std::optional<QuantType> wtype_quant(WType t);       // the block format of a quantised WType
std::optional<WType> wtype_from_quant(QuantType t);  // nullopt for Q8_K (activations only)
size_t wtype_row_bytes(WType t, int64_t cols);       // bytes of one row of `cols` elements
int64_t wtype_block(WType t);                        // elements per block (1 for float types)

struct WeightMatrix {
  WType type = WType::F32;
  const void* data = nullptr;
  int64_t rows = 0;  // output features
  int64_t cols = 0;  // input features
  size_t row_bytes = 0;
  // Rows rewritten into 16-row panels (pack_weight_panels): row(r) is then where row r's group
  // starts, not row r, and only matmul and dequantize_row know the layout.
  bool panels = false;
  // q8_0 panels whose codes are stored + 128, unsigned: the VNNI tiles' operand as it is, where
  // the CPU has no AMX (whose tiles take the codes signed, as stored, with no offset to take off).
  bool panel_codes_u8 = false;

  const uint8_t* row(int64_t r) const {
    return static_cast<const uint8_t*>(data) + size_t(r) * row_bytes;
  }
  size_t bytes() const { return row_bytes * size_t(rows); }
};

// y is [n_tokens][w.rows], x is [n_tokens][w.cols], both row-major f32. Multithreaded (OpenMP).
// Quantised weights: x is quantised once per call to Q8_0/Q8_K (dot_activation_type), so results
// are those of the integer dot products, not of the dequantised weights times x.
void matmul(const WeightMatrix& w, const float* x, int n_tokens, float* y);

namespace kernels {
struct QuantPrepared;
}
// x's rows quantised once as products against weights of type w_type quantise their activations
// (nothing for float types): a MoE layer's tokens, which each of their experts then takes by row
// (MatmulJob::x_rows) instead of quantising its own copy of them again. The same bytes as the
// products would make.
class QuantizedRows {
 public:
  QuantizedRows(WType w_type, const float* x, int n_tokens, int64_t cols);
  ~QuantizedRows();
  QuantizedRows(const QuantizedRows&) = delete;
  QuantizedRows& operator=(const QuantizedRows&) = delete;
  const kernels::QuantPrepared* prepared() const { return prepared_.get(); }

 private:
  std::unique_ptr<kernels::QuantPrepared> prepared_;
};
struct MatmulJob {
  const WeightMatrix* w = nullptr;
  const float* x = nullptr;
  int n_tokens = 0;
  float* y = nullptr;
  // Optional: token i is row x_rows[i] of x (not row i), taken from xq where it holds x quantised
  // for w's type (x is then not read for them).
  const int32_t* x_rows = nullptr;
  const QuantizedRows* xq = nullptr;
};
// Several products in one parallel region: each job's y is exactly what matmul(w, x, n_tokens, y)
// writes for the rows it takes (the same bits), but the jobs' row ranges are shared out together,
// so many small products (a MoE layer's experts) pay for one fork and join, not one each, and no
// thread idles on a short one. Jobs on the same tokens (the same x, x_rows and xq: the gate and up
// of one expert) quantise them once.
void matmul_many(std::span<const MatmulJob> jobs);

// Widens (dequantises) row r of w into out[w.cols] (embedding lookup).
void dequantize_row(const WeightMatrix& w, int64_t r, float* out);

// Rewrites w's rows in place into the 16-row panels the AVX-512 VNNI kernel reads, so that no call
// repacks them again (a call of 2-16 tokens spent most of its time there), and sets w.panels.
// Only the quantised types (q4_0 ... q8_0, q4_K, q5_K, q6_K) with rows a multiple of 16, on a CPU
// that runs those kernels; else w is left as it is. `bytes` is w.data, writable (memory the caller
// owns, not a read-only mapping). Results stay the same bits. Returns w.panels.
bool pack_weight_panels(WeightMatrix& w, uint8_t* bytes);

// Which kernel family runs ("avx512+amx", "avx512", "avx2", "scalar"): chosen once at start-up
// from the CPU's features (FAK_ISA=avx512, avx2 or scalar caps it).
std::string_view matmul_isa();

// BF16 weights: round the activations to bf16 and multiply with the CPU's bf16 dot product
// (AVX512-BF16: twice the multiply-adds per instruction of widening the weights to f32; AMX-BF16's
// tile unit where the CPU has one: Qwen2.5-0.5B BF16 pp512 226 -> 1096 tok/s, the f32 path 326), as
// transformers computes a bf16 checkpoint in bfloat16 (though with f32 sums). Off: the weights are
// widened and x stays f32 (the path for parity with an f32/f64 reference). Takes effect only where
// the CPU has the instruction; results differ from the f32 path's (not bit-identical), the tile
// unit's from vdpbf16ps' (it sums a step's 32 products its own way), and decode == prefill ==
// batched still hold within each. Process-wide; set it before any forward.
void set_bf16_activations(bool on);
// Whether BF16 weights take the bf16 path now (the setting and the CPU).
bool bf16_activations();
// Whether this CPU could (AVX512-BF16 and the AVX-512 kernels enabled).
bool bf16_activations_available();
// Whether the bf16 path runs on AMX-BF16's tile unit (other bits than vdpbf16ps': store keys).
bool bf16_activations_on_tiles();
// Whether the bf16 path multiplies faster than the f32 path on this CPU: on the tile unit, or on a
// vdpbf16ps at full rate (CpuFeatures::bf16_dot_full_rate). Intel's vdpbf16ps without the tile
// unit runs slower than widening the weights (one core, Qwen2.5-0.5B BF16 pp256: 67-68 tok/s
// against 98-111), so there the exact path is also the fast one. `--activations auto`.
bool bf16_activations_faster();

}  // namespace fak
