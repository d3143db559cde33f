// Splitting text with an arbitrary pre-tokenizer regex through PCRE2 (JIT, UTF + UCP). The fallback
// for patterns the hand-written splitter does not know, and the independent check of that splitter.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fak {

// HF tokenizers runs split patterns through Oniguruma; PCRE2 reads the same syntax for everything
// these patterns use, except that its \s also matches U+180E. This rewrites \s (and \S outside a
// character class) to Oniguruma's White_Space set so both engines split alike.
std::string onig_to_pcre2(std::string_view pattern);

// Escapes a literal string (a Split pattern given as {"String": ...}) into a regex.
std::string regex_escape(std::string_view literal);

// The time one encode may spend in regex splitting, proportional to its text: PCRE2's match limit
// applies per call, and a split makes one call per piece, so a pattern that backtracks within
// that limit at every position would otherwise cost milliseconds per byte of every prompt.
struct SplitBudget {
  // note: legitimate patterns split 10-100 MB/s; this allows ~2 µs a byte plus 100 ms.
  static SplitBudget for_text(size_t bytes);
  std::chrono::steady_clock::time_point deadline;
  size_t text_bytes = 0;
};

class RegexSplitter {
 public:
  // Throws fak::Error naming the pattern and PCRE2's message when it does not compile.
  explicit RegexSplitter(std::string_view pattern);

  // Appends the pieces of `text` (valid UTF-8, not checked again) as HF's Split with behaviour
  // Isolated does: every match is a piece, and so is every stretch between matches.
  // A budget past its deadline (checked between matches) throws fak::Error naming the pattern.
  void split(std::string_view text, std::vector<std::string_view>& pieces,
             const SplitBudget* budget = nullptr) const;

  // HF's Pattern::find_matches: the text cut into the matches and the stretches between them, in
  // order (appended to parts); an empty match is a part of its own. Empty text: one empty part.
  struct Part {
    size_t begin, end;
    bool match;
  };
  void find_matches(std::string_view text, std::vector<Part>& parts,
                    const SplitBudget* budget = nullptr) const;
  // Whether the pattern matches the empty string.
  bool matches_empty() const;

 private:
  std::shared_ptr<void> code_;  // pcre2_code_8, freed by pcre2_code_free
  std::string pattern_;         // for error messages
};

}  // namespace fak
