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
// o200k_harmony (gpt-oss), as its tokenizer.json spells it; llama.cpp's `gpt-4o`.
inline constexpr std::string_view kGpt4oPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// DeepSeek-V3's three split stages, as its tokenizer.json spells them; llama.cpp's `deepseek-v3`.
inline constexpr std::string_view kDeepseekV3Patterns[] = {
    R"(\p{N}{1,3})", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}"
    "\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"};
// HF's ByteLevel pre-tokenizer with use_regex = true.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// What a GGUF's tokenizer.ggml.pre name (as llama.cpp's converter writes it) stands for: the split
// stages of the family's tokenizer.json, and its NFC and ignore_merges. Empty splits: unknown name.
struct GgufPreTokenizer {
  std::vector<std::string> splits;
  bool nfc = false, ignore_merges = false;
};
GgufPreTokenizer pre_tokenizer_for_gguf_pre(std::string_view name);
// The name llama.cpp gives a tokenizer.json's split stages, or "" when it has none.
std::string gguf_pre_for_splits(const std::vector<std::string>& splits);

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
