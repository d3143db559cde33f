// Small builders for tensor-table entries (tensor_table.h), shared by the blocks and families:
// one line per tensor in the family files.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "models/tensor_table.h"

namespace fak {

// A layer's name prefixes: HF "layers.3." (under the language model's prefix), GGUF "blk.3.".
struct LayerNames {
  std::string hf, gguf;
  explicit LayerNames(int layer)
      : hf("layers." + std::to_string(layer) + "."), gguf("blk." + std::to_string(layer) + ".") {}
};

inline TensorDef vector_entry(std::vector<float>& v, int64_t n, std::string hf, std::string gguf,
                              HfValue value = HfValue::AsIs) {
  TensorDef d;
  d.kind = TensorKind::Vector;
  d.vector = &v;
  d.rows = n;
  d.hf = std::move(hf);
  d.hf_value = value;
  d.gguf = std::move(gguf);
  return d;
}

// An RMSNorm scale: `fak synth` makes it the identity.
inline TensorDef norm_entry(std::vector<float>& v, int64_t n, std::string hf, std::string gguf,
                            HfValue value = HfValue::AsIs) {
  TensorDef d = vector_entry(v, n, std::move(hf), std::move(gguf), value);
  d.init = TensorDef::Init::NormScale;
  return d;
}

inline TensorDef matrix_entry(WeightMatrix& m, int64_t rows, int64_t cols, std::string hf,
                              std::string gguf, std::string role) {
  TensorDef d;
  d.kind = TensorKind::Matrix;
  d.matrix = &m;
  d.rows = rows;
  d.cols = cols;
  d.hf = std::move(hf);
  d.gguf = std::move(gguf);
  d.role = std::move(role);
  return d;
}

// One matrix per expert; GGUF stacks them as one [n_experts, rows, cols] tensor.
inline TensorDef experts_entry(std::vector<WeightMatrix>& e, int64_t rows, int64_t cols,
                               std::string hf, HfLayout layout, std::string gguf,
                               std::string role) {
  TensorDef d;
  d.kind = TensorKind::Experts;
  d.experts = &e;
  d.rows = rows;
  d.cols = cols;
  d.hf = std::move(hf);
  d.hf_layout = layout;
  d.gguf = std::move(gguf);
  d.role = std::move(role);
  return d;
}

}  // namespace fak
