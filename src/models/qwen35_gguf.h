// llama.cpp's GGUF layout of the Qwen3.5 hybrid (general.architecture "qwen35") against HF's, which
// fak computes with. Besides the names (gguf_loader.cpp, gguf_export.cpp) llama.cpp's converter
// changes three things, and loading undoes each:
//   * RMSNorm weights are stored as the scale itself (1 + w), except the DeltaNet's gated norm;
//   * A_log is stored as ssm_a = -exp(A_log) (fak keeps the same form in memory);
//   * when there are fewer key heads than value heads, the value heads are reordered from HF's
//     grouped order (value head g = k * group + j reads key head k) to a tiled one (position
//     j * n_k_heads + k), so ggml can broadcast key heads with a plain repeat. That touches the V
//     rows of in_proj_qkv and conv1d, the rows of in_proj_z / in_proj_a / in_proj_b, A_log,
//     dt_bias and the columns of out_proj.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/matmul.h"

namespace fak {

struct VHeadOrder {
  int n_k_heads = 1, n_v_heads = 1;
  bool identity() const { return n_k_heads == n_v_heads; }
  // The HF (grouped) head stored at tiled position t, and the tiled position of HF head g.
  int64_t grouped_at(int64_t t) const;
  int64_t tiled_at(int64_t g) const;
};

// Rows [offset + h * per_head, offset + (h + 1) * per_head) of a [rows][row_bytes] buffer, one
// run per value head, moved between the orders (to_tiled: HF -> GGUF); other rows are copied.
std::vector<uint8_t> reorder_v_rows(const uint8_t* src, int64_t rows, size_t row_bytes,
                                    int64_t offset, int64_t per_head, const VHeadOrder& order,
                                    bool to_tiled);
std::vector<float> reorder_v_vec(const std::vector<float>& v, int64_t offset, int64_t per_head,
                                 const VHeadOrder& order, bool to_tiled);
// The columns of m in runs of per_head, one per value head. Quantised rows move whole blocks, so
// per_head must be a multiple of the type's block; throws naming the tensor otherwise.
std::vector<uint8_t> reorder_v_cols(const WeightMatrix& m, int64_t per_head,
                                    const VHeadOrder& order, bool to_tiled,
                                    const std::string& name);

}  // namespace fak
