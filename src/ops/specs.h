// What an op or a layer is asked to compute, in the vocabulary both the model config
// (models/config.h) and the backends (backend/backend.h) speak. Here, below both, so that a
// backend never includes the model layer.
#pragma once

#include <span>

namespace fak {

// The gated MLP's activation: SwiGLU, GeGLU (tanh GELU), or gpt-oss's clamped SwiGLU:
// (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha g) with g = min(gate, limit).
enum class Activation { Silu, GeluTanh, ClampedSwiglu };
// How a MoE router turns its logits into the experts' weights: a softmax over all of them (Qwen),
// each expert's sigmoid, chosen with a correction bias and by groups (GLM-4.5, DeepSeek-V3), or
// the top k logits and a softmax over those k alone (gpt-oss).
enum class RouterKind { Softmax, Sigmoid, SoftmaxChosen };

enum class LayerKind { FullAttention, LinearAttention };  // the token mixer of a layer
enum class FfnKind { Dense, Moe };                        // its feed-forward block

// An attention mixer: causal self-attention with GQA and RoPE.
struct AttentionLayerSpec {
  int window = 0;            // > 0: each token attends to the last `window` positions only
  int rope_table = 0;        // 0: the model's RoPE; 1: the local one of windowed layers (Gemma 3)
  float scale = 1.0f;        // of q.k
  bool qk_norm = false;      // RMSNorm over each q and k head (Qwen3, Qwen3.5, Gemma 3)
  bool output_gate = false;  // q_proj also yields a per-head sigmoid gate on the output (Qwen3.5)
  bool sinks = false;        // a learned logit per head joins each softmax (gpt-oss)
};

// A feed-forward block: a gated MLP, or a mixture of gated experts.
struct FfnSpec {
  FfnKind kind = FfnKind::Dense;
  Activation act = Activation::Silu;  // the dense MLP's (and a MoE's shared expert's)
  // MoE (kind == Moe): the router, then k of n_experts experts per token.
  RouterKind router = RouterKind::Softmax;
  int n_experts = 0, k = 0;
  bool renorm = true;  // the chosen experts' weights renormalised to sum to 1
  int groups = 1, groups_used = 1;
  float routed_scale = 1.0f;
  Activation expert_act = Activation::Silu;
  float clamp_alpha = 1.702f, clamp_limit = 7.0f;  // expert_act == ClampedSwiglu
  bool expert_biases = false;                      // router logits and experts add biases
  int shared_hidden = 0;                           // > 0: an always-on shared expert this wide
  bool shared_gated = true;                        // behind a sigmoid gate (Qwen3.5) or not (GLM)
};

// How a layer's RMSNorms sit around its two sublayers.
struct NormSpec {
  bool sandwich = false;  // the sublayers' outputs are normed too before they join (Gemma 3)
  bool plus_one = false;  // scales stored zero-centred (1 + w), folded in at load (Qwen3.5)
};

// The whole of what one decoder layer computes (beyond its tensors' shapes): the forward pass
// reads only this, and a backend says from it what it cannot run (Backend::unsupported).
struct LayerSpec {
  LayerKind mixer = LayerKind::FullAttention;
  AttentionLayerSpec attention;  // mixer == FullAttention
  FfnSpec ffn;
  NormSpec norms;
};

// What a model's forward pass computes: the embedding's scale and each layer.
struct ForwardSpec {
  float embed_scale = 1.0f;  // embeddings times this (Gemma: sqrt(hidden_size))
  std::span<const LayerSpec> layers;
};

}  // namespace fak
