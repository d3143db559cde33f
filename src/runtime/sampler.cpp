#include "runtime/sampler.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_set>

#include "core/error.h"

namespace fak {

// The first index of the largest value (NaNs never win; 0 if logits[0] is NaN or none is larger).
// Two passes: the maximum through 8 independent running maxima (vectorised: a running index
// reloading logits[best] made this a 0.3 ms scan of a 152k vocab, 3% of a batched decode step),
// then the first index that holds it.
int32_t argmax(std::span<const float> logits) {
  const size_t n = logits.size();
  if (n == 0) return 0;
  float lanes[8];
  for (float& l : lanes) l = logits[0];
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l)
      lanes[l] = logits[i + size_t(l)] > lanes[l] ? logits[i + size_t(l)] : lanes[l];
  float m = lanes[0];
  for (float l : lanes) m = l > m ? l : m;
  for (; i < n; ++i) m = logits[i] > m ? logits[i] : m;
  for (i = 0; i < n; ++i)
    if (logits[i] == m) return int32_t(i);
  return 0;
}

namespace {

// The shortest text that reads back as v ("0", "0.9", "nan", "-inf"), so an error shows the value
// the user gave rather than a rounded one.
std::string shortest(float v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// note: every range test is written so that NaN fails it (NaN compares false to everything).
void require(bool ok, const char* field, const char* range, const std::string& got) {
  if (!ok) fail(std::string(field) + " must be " + range + ", got " + got);
}

bool within(float v, float lo, float hi) {
  return std::isfinite(v) && v >= lo && v <= hi;
}

}  // namespace

void SamplingOptions::validate() const {
  // temperature: above ~100 every logit gap of a real model rounds to a uniform draw.
  require(within(temperature, 0.0f, 100.0f), "temperature", ">= 0 and <= 100",
          shortest(temperature));
  require(top_k >= 0, "top_k", ">= 0", std::to_string(top_k));
  require(within(top_p, 0.0f, 1.0f) && top_p > 0.0f, "top_p", "> 0 and <= 1", shortest(top_p));
  require(within(min_p, 0.0f, 1.0f) && min_p < 1.0f, "min_p", ">= 0 and < 1", shortest(min_p));
  // repetition_penalty: 0 would divide by zero; beyond 10 no model output is meaningful.
  require(within(repetition_penalty, 0.0f, 10.0f) && repetition_penalty > 0.0f,
          "repetition_penalty", "> 0 and <= 10", shortest(repetition_penalty));
  require(repetition_window >= 0, "repetition_window", ">= 0", std::to_string(repetition_window));
  // OpenAI's documented range for both.
  require(within(presence_penalty, -2.0f, 2.0f), "presence_penalty", ">= -2 and <= 2",
          shortest(presence_penalty));
  require(within(frequency_penalty, -2.0f, 2.0f), "frequency_penalty", ">= -2 and <= 2",
          shortest(frequency_penalty));
  for (const auto& [id, bias] : logit_bias) {
    require(id >= 0, "logit_bias token", ">= 0", std::to_string(id));
    require(within(bias, -100.0f, 100.0f), "logit_bias", ">= -100 and <= 100", shortest(bias));
  }
}

Sampler::Sampler(SamplingOptions options) : options_(options), rng_(options.seed) {
  options_.validate();
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  const int32_t id = choose(logits, history);
  // Counted only when a penalty reads the counts: with both at 0 nothing changes (not even time).
  if (options_.presence_penalty != 0.0f || options_.frequency_penalty != 0.0f)
    ++generated_counts_[id];
  return id;
}

int32_t Sampler::choose(std::span<const float> logits, std::span<const int32_t> history) {
  const SamplingOptions& o = options_;
  check(!logits.empty(), "sample: no logits to sample from");
  if (o.temperature == 0.0f && o.repetition_penalty == 1.0f && generated_counts_.empty() &&
      o.logit_bias.empty()) {
    // Plain greedy: the first of the largest, as below, without copying the vocabulary.
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  candidates_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) candidates_[i] = {logits[i], int32_t(i)};
  for (const auto& [id, bias] : o.logit_bias) {
    if (size_t(id) >= candidates_.size()) continue;
    float& l = candidates_[size_t(id)].first;
    l = bias <= -100.0f ? -std::numeric_limits<float>::infinity() : l + bias;
  }
  if (o.repetition_penalty != 1.0f && !history.empty()) {
    // As HF/llama.cpp: divide positive logits, multiply negative ones, once per distinct token.
    std::unordered_set<int32_t> seen;
    size_t from = history.size() > size_t(o.repetition_window)
                      ? history.size() - size_t(o.repetition_window)
                      : 0;
    for (size_t i = from; i < history.size(); ++i) seen.insert(history[i]);
    for (int32_t id : seen) {
      if (id < 0 || size_t(id) >= candidates_.size()) continue;
      float& l = candidates_[size_t(id)].first;
      l = l > 0 ? l / o.repetition_penalty : l * o.repetition_penalty;
    }
  }
  // After the repetition penalty, as vLLM and llama.cpp apply them; before the greedy argmax too.
  for (const auto& [id, count] : generated_counts_) {
    if (size_t(id) >= candidates_.size()) continue;  // a shorter logits span than an earlier call
    candidates_[size_t(id)].first -= o.frequency_penalty * float(count) + o.presence_penalty;
  }
  if (o.temperature == 0.0f) {
    auto best = std::max_element(candidates_.begin(), candidates_.end(),
                                 [](auto& a, auto& b) { return a.first < b.first; });
    return best->second;
  }
  // Sort descending (ties by id for determinism), then cut by top-k, top-p, min-p.
  size_t n = candidates_.size();
  auto by_logit = [](auto& a, auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  if (o.top_k > 0 && size_t(o.top_k) < n) {
    std::partial_sort(candidates_.begin(), candidates_.begin() + o.top_k, candidates_.end(),
                      by_logit);
    n = size_t(o.top_k);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  std::vector<double> probs(n);
  const double mx = candidates_[0].first / o.temperature;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    probs[i] = std::exp(double(candidates_[i].first) / o.temperature - mx);
    sum += probs[i];
  }
  for (auto& p : probs) p /= sum;
  if (o.top_p < 1.0f) {
    double cum = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += probs[i];
      if (cum >= o.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
  }
  if (o.min_p > 0.0f) {
    size_t keep = 1;
    while (keep < n && probs[keep] >= o.min_p * probs[0]) ++keep;
    n = keep;
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += probs[i];
  // note: uniform_real_distribution's output is implementation-defined; derive u from raw bits so
  // a seed gives the same tokens with every standard library.
  const double u = double(rng_() >> 11) * (1.0 / 9007199254740992.0) * total;
  double cum = 0;
  for (size_t i = 0; i < n; ++i) {
    cum += probs[i];
    if (u < cum) return candidates_[i].second;
  }
  return candidates_[n - 1].second;
}

}  // namespace fak
