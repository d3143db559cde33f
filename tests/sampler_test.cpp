#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

namespace fak {

// argmax is the first index of the largest value, NaNs never winning: checked against the
// one-pass definition over sizes around its 8-lane blocks, ties, signed zeros, NaNs and -inf.
TEST(Sampler, ArgmaxIsTheFirstLargest) {
  auto reference = [](const std::vector<float>& v) {
    int32_t best = 0;
    for (size_t i = 1; i < v.size(); ++i)
      if (v[i] > v[size_t(best)]) best = int32_t(i);
    return best;
  };
  std::mt19937 rng(5);
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  for (size_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 40, 151936}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> v(n);
      std::uniform_int_distribution<int> small(-3, 3);  // many ties
      for (auto& x : v) x = float(small(rng));
      if (trial % 4 == 1) v[rng() % n] = nan;
      if (trial % 4 == 2) v[0] = nan;
      if (trial % 5 == 3)
        for (auto& x : v) x = x > 0 ? -0.0f : (x < 0 ? -inf : 0.0f);
      ASSERT_EQ(argmax(v), reference(v)) << "n " << n << " trial " << trial;
    }
  }
}

TEST(Sampler, GreedyIsArgmaxAndTopK1IsGreedy) {
  std::vector<float> l = {0.1f, 2.0f, -1.0f, 1.9f};
  Sampler greedy;
  EXPECT_EQ(greedy.sample(l), 1);
  Sampler k1({.temperature = 1.5f, .top_k = 1, .seed = 3});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(k1.sample(l), 1);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferent) {
  std::vector<float> l(50);
  for (size_t i = 0; i < l.size(); ++i) l[i] = float(i % 7) * 0.3f;
  auto draw = [&](uint64_t seed) {
    Sampler s({.temperature = 1.0f, .seed = seed});
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(l));
    return out;
  };
  EXPECT_EQ(draw(1), draw(1));
  EXPECT_NE(draw(1), draw(2));
}

TEST(Sampler, TemperatureFollowsTheSoftmax) {
  // Two tokens with logits differing by ln(3): probabilities 3/4 and 1/4 at temperature 1.
  std::vector<float> l = {std::log(3.0f), 0.0f};
  Sampler s({.temperature = 1.0f, .seed = 11});
  int first = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) first += s.sample(l) == 0;
  EXPECT_NEAR(double(first) / n, 0.75, 0.02);
}

TEST(Sampler, TopPAndMinPCutTheTail) {
  std::vector<float> l = {3.0f, 2.9f, -5.0f, -6.0f};
  Sampler top_p({.temperature = 1.0f, .top_p = 0.9f, .seed = 5});
  Sampler min_p({.temperature = 1.0f, .min_p = 0.05f, .seed = 5});
  for (int i = 0; i < 500; ++i) {
    EXPECT_LT(top_p.sample(l), 2);
    EXPECT_LT(min_p.sample(l), 2);
  }
}

TEST(Sampler, RepetitionPenaltyPushesSeenTokensDown) {
  std::vector<float> l = {2.0f, 1.9f, 0.0f};
  Sampler s({.repetition_penalty = 1.3f});
  std::vector<int32_t> history = {0};
  EXPECT_EQ(s.sample(l, history), 1);
  EXPECT_EQ(s.sample(l), 0);
}

TEST(Sampler, RejectsNonsenseOptions) {
  EXPECT_THROW(Sampler({.temperature = -1.0f}), Error);
  EXPECT_THROW(Sampler({.top_p = 0.0f}), Error);
  EXPECT_THROW(Sampler({.min_p = 1.0f}), Error);
}

// The message of the fak::Error that validate() throws ("" when it accepts the options).
std::string validation_error(const SamplingOptions& o) {
  try {
    o.validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// validate() is the one source of the ranges: each refusal names the field, the range and the
// value, NaN and infinities included; the edges of every range are accepted.
TEST(SamplingOptions, ValidateNamesFieldRangeAndValue) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::pair<SamplingOptions, std::string>> refused = {
      {{.repetition_penalty = 0.0f}, "repetition_penalty must be > 0 and <= 10, got 0"},
      {{.repetition_penalty = 10.5f}, "repetition_penalty must be > 0 and <= 10, got 10.5"},
      {{.repetition_penalty = nan}, "repetition_penalty must be > 0 and <= 10, got nan"},
      {{.min_p = 1.0f}, "min_p must be >= 0 and < 1, got 1"},
      {{.min_p = -0.25f}, "min_p must be >= 0 and < 1, got -0.25"},
      {{.min_p = nan}, "min_p must be >= 0 and < 1, got nan"},
      {{.temperature = -1.0f}, "temperature must be >= 0 and <= 100, got -1"},
      {{.temperature = 100.5f}, "temperature must be >= 0 and <= 100, got 100.5"},
      {{.temperature = nan}, "temperature must be >= 0 and <= 100, got nan"},
      {{.temperature = inf}, "temperature must be >= 0 and <= 100, got inf"},
      {{.top_k = -1}, "top_k must be >= 0, got -1"},
      {{.top_p = 0.0f}, "top_p must be > 0 and <= 1, got 0"},
      {{.top_p = 1.5f}, "top_p must be > 0 and <= 1, got 1.5"},
      {{.top_p = nan}, "top_p must be > 0 and <= 1, got nan"},
      {{.repetition_window = -1}, "repetition_window must be >= 0, got -1"},
      {{.presence_penalty = 2.5f}, "presence_penalty must be >= -2 and <= 2, got 2.5"},
      {{.presence_penalty = -inf}, "presence_penalty must be >= -2 and <= 2, got -inf"},
      {{.frequency_penalty = -3.0f}, "frequency_penalty must be >= -2 and <= 2, got -3"},
      {{.frequency_penalty = nan}, "frequency_penalty must be >= -2 and <= 2, got nan"},
  };
  for (const auto& [options, message] : refused) {
    EXPECT_EQ(validation_error(options), message);
    // The Sampler refuses exactly what validate() refuses, with the same words.
    try {
      Sampler s(options);
      ADD_FAILURE() << "Sampler accepted options validate() refuses: " << message;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
  }
  for (const SamplingOptions& edge : std::vector<SamplingOptions>{
           {.temperature = 0.0f, .top_p = 1.0f, .min_p = 0.0f},
           {.temperature = 100.0f, .top_k = 1 << 30, .top_p = 1e-6f, .min_p = 0.999f},
           {.repetition_penalty = 10.0f, .repetition_window = 0},
           {.repetition_penalty = 1e-3f, .presence_penalty = -2.0f, .frequency_penalty = 2.0f},
           {.presence_penalty = 2.0f, .frequency_penalty = -2.0f}}) {
    EXPECT_EQ(validation_error(edge), "");
    EXPECT_NO_THROW(Sampler{edge});
  }
}

// Sequences the sampler drew before presence/frequency penalties existed (same logits, options
// and seeds): with both penalties at 0 the draws must stay bit for bit what they were.
TEST(Sampler, ZeroPenaltiesDrawWhatTheSamplerDrewBefore) {
  std::vector<float> l;
  for (int i = 0; i < 40; ++i) l.push_back(std::sin(float(i) * 1.7f) * 3.0f);
  const std::vector<int32_t> history = {3, 5, 5, 9, 17};
  struct Case {
    SamplingOptions options;
    bool with_history;
    std::vector<int32_t> want;
  };
  const std::vector<Case> cases = {
      {{.temperature = 0.9f, .presence_penalty = 0.0f, .frequency_penalty = 0.0f, .seed = 42},
       false,
       {5, 16, 5, 1, 20, 12, 27, 38, 23, 38, 12, 27, 8, 16, 30, 9, 5, 34, 12, 12, 5, 1, 34, 12}},
      {{.temperature = 1.3f,
        .top_k = 12,
        .top_p = 0.9f,
        .min_p = 0.02f,
        .repetition_penalty = 1.2f,
        .seed = 7},
       true,
       {16, 30, 12, 19, 1,  12, 8, 19, 23, 16, 16, 27,
        38, 23, 8,  23, 30, 30, 8, 23, 27, 23, 12, 12}},
      {{.repetition_penalty = 1.5f}, true, std::vector<int32_t>(24, 12)},
  };
  for (const Case& c : cases) {
    Sampler s(c.options);
    std::vector<int32_t> got;
    for (int i = 0; i < 24; ++i)
      got.push_back(s.sample(
          l, c.with_history ? std::span<const int32_t>(history) : std::span<const int32_t>()));
    EXPECT_EQ(got, c.want);
  }
}

// Greedy, so every pick follows from the arithmetic: token 0 leads by 0.375 and loses 0.25 per
// time it was generated, so it wins twice, then the two alternate as their counts grow.
TEST(Sampler, FrequencyPenaltyGrowsWithEachRepeat) {
  const std::vector<float> l = {2.0f, 1.625f};
  Sampler plain;
  Sampler penalised({.frequency_penalty = 0.25f});
  std::vector<int32_t> got, unpenalised;
  for (int i = 0; i < 6; ++i) {
    got.push_back(penalised.sample(l));
    unpenalised.push_back(plain.sample(l));
  }
  EXPECT_EQ(got, (std::vector<int32_t>{0, 0, 1, 0, 1, 0}));
  EXPECT_EQ(unpenalised, std::vector<int32_t>(6, 0));
  // The logits the caller passed are left as they were.
  EXPECT_EQ(l, (std::vector<float>{2.0f, 1.625f}));
}

// The presence penalty is paid once per generated token, however often it repeats: token 0 drops
// to 1.5 once and stays there, above token 2 (1.25) but below token 1 until 1 is generated too.
TEST(Sampler, PresencePenaltyIsPaidOnce) {
  const std::vector<float> l = {2.0f, 1.625f, 1.25f};
  Sampler s({.presence_penalty = 0.5f});
  std::vector<int32_t> got;
  for (int i = 0; i < 6; ++i) got.push_back(s.sample(l));
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 0, 0, 0, 0}));
  // A frequency penalty of the same size keeps lowering the repeated token instead.
  Sampler f({.frequency_penalty = 0.5f});
  got.clear();
  for (int i = 0; i < 6; ++i) got.push_back(f.sample(l));
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 0, 2, 1, 0}));
}

// Only tokens the sampler generated count: the prompt (history) does not, unlike the repetition
// penalty, which reads it.
TEST(Sampler, PenaltiesIgnoreThePrompt) {
  const std::vector<float> l = {2.0f, 1.625f};
  const std::vector<int32_t> prompt = {0, 0, 0, 0};
  Sampler s({.presence_penalty = 2.0f, .frequency_penalty = 2.0f});
  EXPECT_EQ(s.sample(l, prompt), 0);
  EXPECT_EQ(s.sample(l, prompt), 1);  // now 0 was generated: 2 - 2 - 2 = -2 < 1.625
}

// A negative penalty rewards repeats: at temperature 1 over two equal logits, a token gains 2 per
// time it was drawn, so one soon takes nearly every draw (without the penalty, about half each).
TEST(Sampler, NegativeFrequencyPenaltyFavoursRepeats) {
  const std::vector<float> l = {0.0f, 0.0f};
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Sampler rewarded({.temperature = 1.0f, .frequency_penalty = -2.0f, .seed = seed});
    Sampler plain({.temperature = 1.0f, .seed = seed});
    int zeros = 0, plain_zeros = 0;
    for (int i = 0; i < 100; ++i) {
      zeros += rewarded.sample(l) == 0;
      plain_zeros += plain.sample(l) == 0;
    }
    EXPECT_GE(std::max(zeros, 100 - zeros), 90) << "seed " << seed;
    EXPECT_LT(std::max(plain_zeros, 100 - plain_zeros), 75) << "seed " << seed;
  }
}

}  // namespace fak
