#include "models/deltanet.h"

#include "core/error.h"

namespace fak {

void deltanet_layer(const ModelConfig& c, const DeltaNetWeights& w, int layer,
                    std::span<const BatchItem> batch, const float* xn, int T, float* out) {
  fail("Gated DeltaNet layers (qwen3_5_text) are not supported yet");
}

}  // namespace fak
