// What the CUDA kernels can run, read from a ForwardSpec: the rule Backend::unsupported applies on
// this device, kept apart from the kernels (no CUDA header) so that a CPU-only build tests it
// on every family's config (tests/layer_spec_test.cpp).
#pragma once

#include <string>

#include "ops/specs.h"

namespace fak {

// Empty when the CUDA kernels cover every op of `forward`; else the first op they lack, with its
// layer ("layer 0: sliding-window attention").
inline std::string cuda_unsupported(const ForwardSpec& forward) {
  if (forward.embed_scale != 1.0f) return "scaled embeddings";
  for (size_t l = 0; l < forward.layers.size(); ++l) {
    const LayerSpec& s = forward.layers[l];
    const std::string at = "layer " + std::to_string(l) + ": ";
    if (s.mixer == LayerKind::FullAttention) {
      if (s.attention.window > 0) return at + "sliding-window attention";
      if (s.attention.sinks) return at + "attention sinks";
    }
    const FfnSpec& f = s.ffn;
    if ((f.kind == FfnKind::Dense || f.shared_hidden > 0) && f.act != Activation::Silu)
      return at + "a GeGLU MLP";
    if (f.kind == FfnKind::Moe) {
      if (f.router != RouterKind::Softmax || f.routed_scale != 1.0f)
        return at + "a sigmoid or chosen-softmax MoE router";
      if (f.expert_biases || f.expert_act != Activation::Silu)
        return at + "experts with biases or a clamped SwiGLU";
    }
  }
  return "";
}

}  // namespace fak
