// Running tokenizer.json's normalizer (tokenizer/steps.h) over text, as HF `tokenizers` does: each
// step in order over the whole text (a text between added tokens).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex_split.h"
#include "tokenizer/steps.h"

namespace fak {

class Normalizer {
 public:
  Normalizer() = default;
  // Compiles the Replace patterns; throws fak::Error naming a pattern PCRE2 refuses.
  explicit Normalizer(std::vector<NormalizerStep> steps);

  bool empty() const { return steps_.empty(); }
  // Normalized text (input and output valid UTF-8).
  std::string apply(std::string_view text, const SplitBudget* budget = nullptr) const;

 private:
  std::vector<NormalizerStep> steps_;
  std::vector<RegexSplitter> patterns_;  // one per Replace step, in order
};

// Rust's str::to_lowercase over valid UTF-8 (U+0130 and the final-sigma rule included).
std::string rust_lowercase(std::string_view text);

}  // namespace fak
