// Logits -> token. Greedy when temperature is 0; otherwise repetition penalty, temperature,
// top-k, top-p, min-p in llama.cpp's order, with a per-sampler seeded RNG (same seed, same output).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace fak {

struct SamplingOptions {
  float temperature = 0.0f;         // 0 = greedy
  int top_k = 0;                    // 0 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off; applied over the last repetition_window tokens
  int repetition_window = 64;
  uint64_t seed = 0;

  // The one place the allowed ranges live: the Sampler calls it, and so does every edge that
  // takes options from a user (the CLI; the server's request validator should too). Throws
  // fak::Error naming the field, its range and the value given, e.g.
  // "repetition_penalty must be > 0 and <= 10, got 0". NaN and infinities are always refused.
  void validate() const;
};

class Sampler {
 public:
  // Throws fak::Error when options.validate() does.
  explicit Sampler(SamplingOptions options = {});
  // history: tokens so far (for the repetition penalty). Logits are not modified.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history = {});
  const SamplingOptions& options() const { return options_; }

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

int32_t argmax(std::span<const float> logits);

}  // namespace fak
