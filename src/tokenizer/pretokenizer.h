// Pre-tokenization: cutting normalised text into the pieces BPE then works on one at a time, as the
// Split regex of tokenizer.json defines them. The three patterns real byte-level models use get a
// hand-written splitter (no regex engine on the hot path); any other pattern goes to PCRE2.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex_split.h"

namespace fak {

// The patterns exactly as tokenizer.json spells them.
inline constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen3.5 / Qwen3.6: Qwen2's shape with combining marks (\p{M}) kept inside words and out of
// punctuation runs (llama.cpp's `qwen35` pre-tokenizer). Split by PCRE2 (no hand-written splitter).
inline constexpr std::string_view kQwen35Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// HF's ByteLevel pre-tokenizer with use_regex = true.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// The split pattern for a GGUF tokenizer.ggml.pre name (as llama.cpp names them), or an empty
// string when the name is not one of the known byte-level families.
std::string_view pattern_for_gguf_pre(std::string_view name);

class PreTokenizer {
 public:
  enum class Kind { kQwen2, kLlama3, kGpt2, kRegex };

  // Known patterns use the hand-written splitter; any other compiles with PCRE2 (fak::Error when
  // it does not). An empty pattern means Qwen2's.
  explicit PreTokenizer(std::string_view pattern);
  // PCRE2 even for a known pattern: the independent check of the hand-written splitter.
  static PreTokenizer regex_only(std::string_view pattern);

  // Appends the pieces of `text` (valid UTF-8), views into it that cover it in order. A regex
  // split stops with fak::Error once `budget` runs out (the hand-written ones are linear).
  void split(std::string_view text, std::vector<std::string_view>& pieces,
             const SplitBudget* budget = nullptr) const;

  // The text as RegexSplitter::find_matches cuts it (the known patterns cover every character:
  // their pieces are all matches).
  void find_matches(std::string_view text, std::vector<RegexSplitter::Part>& parts,
                    const SplitBudget* budget = nullptr) const;

  Kind kind() const { return kind_; }

 private:
  PreTokenizer(Kind kind, std::string_view pattern);
  Kind kind_;
  std::vector<RegexSplitter> regex_;  // one entry for kRegex, empty otherwise
};

}  // namespace fak
