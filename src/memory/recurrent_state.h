// The per-sequence state of a hybrid model's Gated DeltaNet layers: what replaces the KV cache for
// linear attention. Fixed size whatever the context length, so a decode step costs the same at
// token 10 and token 100000; the price is that it cannot be edited, only replaced by a copy taken
// earlier (a checkpoint, runtime/session) and advanced again.
//
// Per linear-attention layer, in one flat f32 buffer:
//   conv  [conv_dim][kernel - 1]  the last kernel - 1 inputs of the causal depthwise conv (oldest
//                                 first); conv_dim = 2 * key_dim + value_dim
//   ssm   [n_v_heads][k_head_dim][v_head_dim]  the delta-rule memory S
// All zeros is the state before the first token (HF: no cache / zero padding).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace fak {

// The sizes a state is made of, derived from a model's config (ModelConfig::recurrent_shape()):
// storage sits below the models, so it takes sizes, not the config.
struct RecurrentShape {
  std::vector<bool> linear_layers;  // per model layer: true for Gated DeltaNet layers
  size_t conv_floats = 0;           // per linear layer: conv_dim * (kernel - 1)
  size_t ssm_floats = 0;            // per linear layer: n_v_heads * k_head_dim * v_head_dim
};

struct RecurrentState {
  RecurrentState() = default;
  explicit RecurrentState(const RecurrentShape& shape);

  // `layer` is the model's layer index; it must be a linear-attention layer.
  float* conv(int layer) { return data.data() + offset(layer); }
  float* ssm(int layer) { return conv(layer) + conv_floats; }
  const float* conv(int layer) const { return data.data() + offset(layer); }
  const float* ssm(int layer) const { return conv(layer) + conv_floats; }

  void clear();                                // back to the state before any token
  bool empty() const { return data.empty(); }  // a dense model's (absent) state
  size_t bytes() const { return data.size() * sizeof(float); }
  bool operator==(const RecurrentState& o) const;  // bitwise, for tests

  // Raw little-endian f32 bytes, for session files. read() checks the size against this shape.
  void write(std::string& out) const;
  void read(const char* bytes, size_t n);

  std::vector<float> data;
  std::vector<int> slot;  // per model layer: index among linear layers, -1 for attention layers
  size_t conv_floats = 0, ssm_floats = 0;

 private:
  size_t offset(int layer) const {
    return size_t(slot[size_t(layer)]) * (conv_floats + ssm_floats);
  }
};

}  // namespace fak
