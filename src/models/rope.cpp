#include "models/rope.h"

#include <algorithm>
#include <cmath>

namespace fak {

double yarn_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

namespace {

// HF _compute_yarn_parameters. Dimension pairs that turn more than beta_fast times over the
// trained context keep their frequency (extrapolation), those turning fewer than beta_slow times
// are slowed by `factor` (interpolation), and a linear ramp blends the band between. The band's
// ends come from inverting "rotations = ctx / (2 pi base^(2d/dim))" for d, in double as HF does
// in Python; the per-frequency arithmetic is float32 as HF's tensors are.
void yarn_inv_freq(const ModelConfig& c, int rot, std::vector<float>& inv_freq) {
  const double dim = rot;
  auto correction_dim = [&](double rotations) {
    return dim * std::log(c.rope_original_max_pos / (rotations * 2 * M_PI)) /
           (2 * std::log(c.rope_theta));
  };
  double low = correction_dim(c.rope_yarn_beta_fast);
  double high = correction_dim(c.rope_yarn_beta_slow);
  if (c.rope_yarn_truncate) {  // gpt-oss sets truncate false and keeps the fractional ends
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // HF's guard against a zero-width ramp
  const float base = float(c.rope_theta);
  const float factor = float(c.rope_factor);
  const float low_f = float(low), width_f = float(high - low);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float pos_freq = std::pow(base, float(2 * i) / float(rot));
    const float extrapolation = 1.0f / pos_freq;
    const float interpolation = 1.0f / (factor * pos_freq);
    const float ramp = std::clamp((float(i) - low_f) / width_f, 0.0f, 1.0f);
    // note: kept as HF writes it, 1 - (1 - ramp) and all: each step rounds in float32, and
    // simplifying the algebra would move the last bit.
    const float extrapolation_factor = 1.0f - ramp;
    inv_freq[i] =
        interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
}

}  // namespace

Rope::Rope(const ModelConfig& c) : rot_(c.rotary_dim) {
  const int half = rot_ / 2;
  inv_freq_.resize(size_t(half));
  const float base = float(c.rope_theta);
  for (int i = 0; i < half; ++i) {
    float exponent = float(2 * i) / float(rot_);
    inv_freq_[size_t(i)] = 1.0f / std::pow(base, exponent);
  }
  if (c.rope_scaling == RopeScaling::Yarn) {
    yarn_inv_freq(c, rot_, inv_freq_);
    attention_scaling_ = float(c.rope_attention_factor);
  } else if (c.rope_scaling == RopeScaling::Linear) {
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
      const float smooth =
          (float(c.rope_original_max_pos) / wavelen - float(c.rope_low_freq_factor)) /
          float(c.rope_high_freq_factor - c.rope_low_freq_factor);
      const float smoothed = (1.0f - smooth) * scaled / float(factor) + smooth * scaled;
      const bool medium = !(wavelen < float(high_wavelen)) && !(wavelen > float(low_wavelen));
      f = medium ? smoothed : scaled;
    }
  }
}

void Rope::shift_angles(int delta, float* cos, float* sin) const {
  const float d = float(delta);
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const float angle = inv_freq_[i] * d;
    cos[i] = float(std::cos(double(angle)));
    sin[i] = float(std::sin(double(angle)));
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
