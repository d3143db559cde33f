#include "models/qwen35_gguf.h"

#include <cstring>
#include <string>

#include "core/error.h"

namespace fak {

int64_t VHeadOrder::grouped_at(int64_t t) const {
  const int64_t group = n_v_heads / n_k_heads;
  return (t % n_k_heads) * group + t / n_k_heads;
}

int64_t VHeadOrder::tiled_at(int64_t g) const {
  const int64_t group = n_v_heads / n_k_heads;
  return (g % group) * n_k_heads + g / group;
}

std::vector<uint8_t> reorder_v_rows(const uint8_t* src, int64_t rows, size_t row_bytes,
                                    int64_t offset, int64_t per_head, const VHeadOrder& order,
                                    bool to_tiled) {
  std::vector<uint8_t> out(src, src + size_t(rows) * row_bytes);
  check(offset + per_head * order.n_v_heads <= rows, "reorder_v_rows: heads exceed the rows");
  const size_t run = size_t(per_head) * row_bytes;
  for (int64_t dst = 0; dst < order.n_v_heads; ++dst) {
    const int64_t from = to_tiled ? order.grouped_at(dst) : order.tiled_at(dst);
    std::memcpy(out.data() + size_t(offset + dst * per_head) * row_bytes,
                src + size_t(offset + from * per_head) * row_bytes, run);
  }
  return out;
}

std::vector<float> reorder_v_vec(const std::vector<float>& v, int64_t offset, int64_t per_head,
                                 const VHeadOrder& order, bool to_tiled) {
  std::vector<uint8_t> bytes =
      reorder_v_rows(reinterpret_cast<const uint8_t*>(v.data()), int64_t(v.size()), sizeof(float),
                     offset, per_head, order, to_tiled);
  std::vector<float> out(v.size());
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::vector<uint8_t> reorder_v_cols(const WeightMatrix& m, int64_t per_head,
                                    const VHeadOrder& order, bool to_tiled,
                                    const std::string& name) {
  if (per_head % wtype_block(m.type) != 0)
    fail(name + ": " + std::string(wtype_name(m.type)) + " blocks of " +
         std::to_string(wtype_block(m.type)) + " columns straddle value heads of " +
         std::to_string(per_head) + "; store it as f32, f16, bf16 or a 32-element block type");
  check(per_head * order.n_v_heads == m.cols, "reorder_v_cols: heads do not cover the columns");
  const size_t run = wtype_row_bytes(m.type, per_head);
  std::vector<uint8_t> out(m.bytes());
  for (int64_t r = 0; r < m.rows; ++r) {
    const uint8_t* src = m.row(r);
    uint8_t* dst = out.data() + size_t(r) * m.row_bytes;
    for (int64_t h = 0; h < order.n_v_heads; ++h) {
      const int64_t from = to_tiled ? order.grouped_at(h) : order.tiled_at(h);
      std::memcpy(dst + size_t(h) * run, src + size_t(from) * run, run);
    }
  }
  return out;
}

}  // namespace fak
