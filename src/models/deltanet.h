// Gated DeltaNet (Qwen3.5 linear attention) layer: declared here so the forward pass can call it.
#pragma once

#include <span>

#include "models/config.h"
#include "models/model.h"
#include "models/weights.h"

namespace fak {

// xn: [T][dim] normed input of all batch items; out: [T][dim]. Updates each item's RecurrentState.
void deltanet_layer(const ModelConfig& c, const DeltaNetWeights& w, int layer,
                    std::span<const BatchItem> batch, const float* xn, int T, float* out);

}  // namespace fak
