#include "models/tensor_table.h"

#include "core/error.h"
#include "models/family.h"

namespace fak {

void shape_weights(const ModelConfig& c, ModelWeights& w) {
  check(c.family != nullptr, "tensor table: the config has no family");
  check(c.layers.size() == size_t(c.n_layers), "tensor table: layer slots do not cover the layers");
  w.layers.assign(size_t(c.n_layers), LayerWeights{});
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = w.layers[size_t(l)];
    L.kind = c.layers[size_t(l)].mixer;
    L.ffn = c.layers[size_t(l)].ffn;
    if (L.ffn == FfnKind::Moe) {
      L.moe.gate.assign(size_t(c.n_experts), WeightMatrix{});
      L.moe.up.assign(size_t(c.n_experts), WeightMatrix{});
      L.moe.down.assign(size_t(c.n_experts), WeightMatrix{});
    }
  }
  w.mtp = MtpWeights{};
  if (c.mtp_layers > 0) {
    LayerWeights& L = w.mtp.layer;
    L.kind = LayerKind::FullAttention;
    L.ffn = c.is_moe() ? FfnKind::Moe : FfnKind::Dense;
    if (L.ffn == FfnKind::Moe) {
      L.moe.gate.assign(size_t(c.n_experts), WeightMatrix{});
      L.moe.up.assign(size_t(c.n_experts), WeightMatrix{});
      L.moe.down.assign(size_t(c.n_experts), WeightMatrix{});
    }
  }
}

int table_parts_end(const ModelConfig& c) {
  return c.n_layers + (c.mtp_layers > 0 ? 1 : 0);
}

std::vector<TensorDef> tensor_table_part(const ModelConfig& c, ModelWeights& w, int layer) {
  std::vector<TensorDef> out;
  c.family->tensors(c, w, layer, out);
  for (TensorDef& d : out) {
    d.layer = layer;
    if (d.kind == TensorKind::Experts) d.n_experts = c.n_experts;
  }
  return out;
}

std::vector<TensorDef> tensor_table(const ModelConfig& c, ModelWeights& w) {
  shape_weights(c, w);
  std::vector<TensorDef> all = tensor_table_part(c, w, -1);
  for (int l = 0; l < table_parts_end(c); ++l) {
    std::vector<TensorDef> part = tensor_table_part(c, w, l);
    all.insert(all.end(), std::make_move_iterator(part.begin()),
               std::make_move_iterator(part.end()));
  }
  return all;
}

namespace {

// The table of an already loaded model, without resizing its layers (which would drop them).
template <typename Fn>
void walk_loaded(const ModelConfig& c, ModelWeights& w, Fn&& fn) {
  for (int l = -1; l < table_parts_end(c); ++l)
    for (const TensorDef& d : tensor_table_part(c, w, l)) fn(d);
}

}  // namespace

void for_each_matrix(const ModelConfig& c, ModelWeights& w,
                     const std::function<void(WeightMatrix&, const TensorDef&)>& fn) {
  walk_loaded(c, w, [&](const TensorDef& d) {
    if (d.kind == TensorKind::Matrix) fn(*d.matrix, d);
    if (d.kind == TensorKind::Experts)
      for (WeightMatrix& m : *d.experts) fn(m, d);
  });
}

size_t matrix_bytes(const ModelConfig& c, const ModelWeights& w) {
  size_t bytes = 0;
  // note: the walk only reads through the non-const view.
  for_each_matrix(c, const_cast<ModelWeights&>(w),
                  [&](WeightMatrix& m, const TensorDef&) { bytes += m.bytes(); });
  return bytes;
}

double matrix_params(const ModelConfig& c, const ModelWeights& w) {
  double n = 0;
  for_each_matrix(c, const_cast<ModelWeights&>(w),
                  [&](WeightMatrix& m, const TensorDef&) { n += double(m.rows) * double(m.cols); });
  return n;
}

double active_bytes_per_token(const ModelConfig& c, const ModelWeights& w) {
  const bool tied = c.tie_embeddings;
  double bytes = 0;
  for_each_matrix(c, const_cast<ModelWeights&>(w), [&](WeightMatrix& m, const TensorDef& d) {
    if (d.role == "token_embd" && !tied) return;  // one row looked up per token
    const double share =
        d.kind == TensorKind::Experts ? double(c.n_experts_used) / double(c.n_experts) : 1.0;
    bytes += double(m.bytes()) * share;
  });
  return bytes;
}

}  // namespace fak
