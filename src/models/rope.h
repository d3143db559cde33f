// Rotary position embedding angles, computed the way HF transformers does: inv_freq and
// pos * inv_freq in float32 (even when the rest of the model runs in float64), then cos/sin.
// Matching that float32 rounding is what keeps logits within 1e-5 at long positions.
#pragma once

#include <vector>

#include "models/config.h"

namespace fak {

// YaRN's attention scale for a context stretched `scale` times: 0.1 * mscale * ln(scale) + 1, and
// 1 when not stretched (HF get_mscale; double, as HF computes it in Python).
double yarn_mscale(double scale, double mscale);

class Rope {
 public:
  explicit Rope(const ModelConfig& config);
  int rotary_dim() const { return rot_; }
  float inv_freq(int i) const { return inv_freq_[size_t(i)]; }
  float attention_scaling() const { return attention_scaling_; }
  // cos/sin receive rotary_dim / 2 values for position pos, already multiplied by the attention
  // factor (YaRN; 1 otherwise) as HF multiplies its cos/sin caches.
  void angles(int pos, float* cos, float* sin) const;
  // The rotation from position `from` to `from + delta`, without the attention factor (a key
  // rotated once already carries it): what moves a stored key to a new position (shift eviction
  // on a cache that keeps no pre-RoPE keys).
  void shift_angles(int delta, float* cos, float* sin) const;

 private:
  int rot_;
  std::vector<float> inv_freq_;
  float attention_scaling_ = 1.0f;
};

}  // namespace fak
