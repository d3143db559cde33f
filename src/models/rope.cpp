#include "models/rope.h"

#include <cmath>

namespace fak {

Rope::Rope(const ModelConfig& c) : rot_(c.rotary_dim) {
  const int half = rot_ / 2;
  inv_freq_.resize(size_t(half));
  const float base = float(c.rope_theta);
  for (int i = 0; i < half; ++i) {
    float exponent = float(2 * i) / float(rot_);
    inv_freq_[size_t(i)] = 1.0f / std::pow(base, exponent);
  }
  if (c.rope_scaling == RopeScaling::Linear) {
    for (auto& f : inv_freq_) f = f / float(c.rope_factor);
  } else if (c.rope_scaling == RopeScaling::Llama3) {
    // HF _compute_llama3_parameters: long wavelengths are slowed by `factor`, short ones kept,
    // the band between interpolated smoothly.
    const double factor = c.rope_factor;
    const double low_wavelen = c.rope_original_max_pos / c.rope_low_freq_factor;
    const double high_wavelen = c.rope_original_max_pos / c.rope_high_freq_factor;
    for (auto& f : inv_freq_) {
      const float wavelen = 2.0f * float(M_PI) / f;
      float scaled = wavelen > float(low_wavelen) ? f / float(factor) : f;
      const float smooth = (float(c.rope_original_max_pos) / wavelen - float(c.rope_low_freq_factor)) /
                           float(c.rope_high_freq_factor - c.rope_low_freq_factor);
      const float smoothed = (1.0f - smooth) * scaled / float(factor) + smooth * scaled;
      const bool medium = !(wavelen < float(high_wavelen)) && !(wavelen > float(low_wavelen));
      f = medium ? smoothed : scaled;
    }
  }
}

void Rope::angles(int pos, float* cos, float* sin) const {
  const float p = float(pos);
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const float angle = inv_freq_[i] * p;  // float32 product, as HF
    cos[i] = float(std::cos(double(angle))) * attention_scaling_;
    sin[i] = float(std::sin(double(angle))) * attention_scaling_;
  }
}

}  // namespace fak
