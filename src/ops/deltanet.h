// Gated DeltaNet (Qwen3.5 linear attention) on the CPU: the part of the layer between its input
// projections and its gated output norm (ops/deltanet.cpp says what it computes and how it rounds).
#pragma once

#include <span>
#include <vector>

namespace fak {

struct RecurrentState;

// Gated DeltaNet's sizes and its per-layer constants (models/weights.h DeltaNetWeights).
struct DeltaNetParams {
  int n_k_heads = 0, n_v_heads = 0, k_head_dim = 0, v_head_dim = 0, conv_kernel = 0;
  const std::vector<float>* conv = nullptr;     // [conv_dim][kernel]
  const std::vector<float>* ssm_a = nullptr;    // [n_v_heads] -exp(A_log)
  const std::vector<float>* dt_bias = nullptr;  // [n_v_heads]
  // The value heads in llama.cpp's tiled order (models/qwen35_gguf.h), not HF's grouped one: head
  // h then reads key head h % n_k_heads, not h / (n_v_heads / n_k_heads). Every value-head input
  // and the output are in that order; each head's arithmetic is the same.
  bool tiled_v_heads = false;
  int key_head(int h) const { return tiled_v_heads ? h % n_k_heads : h / (n_v_heads / n_k_heads); }
  int key_dim() const { return n_k_heads * k_head_dim; }
  int value_dim() const { return n_v_heads * v_head_dim; }
  int conv_dim() const { return 2 * key_dim() + value_dim(); }
};

// One sequence of a call: its rows follow the previous sequence's.
struct DeltaNetSequence {
  RecurrentState* state = nullptr;  // updated in place
  int n_tokens = 0;
};

// For model layer `layer`: qkv [T][conv_dim] (the in_proj_qkv rows) through the
// causal conv + SiLU, q and k heads L2-normalised (q scaled by 1/sqrt(k_head_dim)), beta =
// sigmoid(b), g = ssm_a * softplus(a + dt_bias) from b, a [T][n_v_heads], and the delta rule over
// each sequence's state; core [T][value_dim]. Scratch: conv [T][conv_dim], beta and g
// [T][n_v_heads].
struct DeltaNetScratch {
  float *conv, *beta, *g;
};

// What one call's DeltaNet layers read for one sequence, kept so that its state can be wound back
// to any token of the call without a forward call (speculative decoding drops rejected draft tokens
// this way: Model::rewind_state). `before` is the state before the call (the session copies it);
// the inputs are the backend's to record (the CPU's does; where `recorded` stays false the caller
// restores `before` and replays the tokens it keeps with a forward call instead).
struct DeltaNetTrail {
  RecurrentState* before = nullptr;
  int n_tokens = 0;
  bool recorded = false;
  // Per model layer (empty for attention layers): the call's qkv [n][conv_dim], b and a
  // [n][n_v_heads] rows, as deltanet_core took them.
  std::vector<std::vector<float>> qkv, b, a;
};
void deltanet_core(const DeltaNetParams& p, int layer, std::span<const DeltaNetSequence> seqs,
                   const float* qkv, const float* b, const float* a, const DeltaNetScratch& scratch,
                   float* core);

}  // namespace fak
