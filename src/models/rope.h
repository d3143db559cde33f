// Rotary position embedding angles, computed the way HF transformers does: inv_freq and
// pos * inv_freq in float32 (even when the rest of the model runs in float64), then cos/sin.
// Matching that float32 rounding is what keeps logits within 1e-5 at long positions.
#pragma once

#include <vector>

#include "models/config.h"

namespace fak {

class Rope {
 public:
  explicit Rope(const ModelConfig& config);
  int rotary_dim() const { return rot_; }
  // cos/sin receive rotary_dim / 2 values for position pos.
  void angles(int pos, float* cos, float* sin) const;

 private:
  int rot_;
  std::vector<float> inv_freq_;
  float attention_scaling_ = 1.0f;
};

}  // namespace fak
