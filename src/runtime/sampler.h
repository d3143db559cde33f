// Logits -> token. Greedy when temperature is 0; otherwise repetition penalty, presence and
// frequency penalties, temperature, top-k, top-p, min-p in llama.cpp's order, with a per-sampler
// seeded RNG (same seed, same output).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

namespace fak {

struct SamplingOptions {
  float temperature = 0.0f;         // 0 = greedy
  int top_k = 0;                    // 0 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off; applied over the last repetition_window tokens
  int repetition_window = 64;
  // OpenAI / vLLM semantics over the tokens this sampler has generated (never the prompt):
  // logit[t] -= frequency_penalty * count(t) + presence_penalty * (count(t) > 0). 0 = off.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // OpenAI's logit_bias: (token, bias in [-100, 100]) added to the logit before everything else;
  // -100 bans the token outright (its logit becomes -inf), as OpenAI documents it.
  std::vector<std::pair<int32_t, float>> logit_bias = {};
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
  // history: tokens so far (for the repetition penalty). Logits are not modified. The returned
  // token counts as generated for the presence and frequency penalties of later calls.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history = {});
  const SamplingOptions& options() const { return options_; }

 private:
  int32_t choose(std::span<const float> logits, std::span<const int32_t> history);

  SamplingOptions options_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
  std::unordered_map<int32_t, int> generated_counts_;  // token -> times this sampler returned it
};

int32_t argmax(std::span<const float> logits);

}  // namespace fak
