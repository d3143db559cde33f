// Hand-written splitters for the Qwen2, Llama-3 and GPT-2 split patterns; see pretokenizer.h.
//
// Each function below answers "where does the regex's match starting at p end?", going through the
// alternatives in the pattern's order as a backtracking engine would (first alternative that
// matches wins, quantifiers greedy). The patterns cover every character, so matches tile the text.
#include "tokenizer/pretokenizer.h"

#include <utf8proc.h>

#include <array>

#include "tokenizer/utf8.h"

namespace fak {
namespace {

using Ptr = const unsigned char*;

enum : uint8_t {
  kLetter = 1,  // \p{L}
  kNumber = 2,  // \p{N}
  kSpace = 4,   // \s (White_Space)
  kCrLf = 8,    // \r or \n (also kSpace)
};

constexpr std::array<uint8_t, 128> make_ascii_classes() {
  std::array<uint8_t, 128> t{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) t[c] = kLetter;
    if (c >= '0' && c <= '9') t[c] = kNumber;
    if (c == ' ' || (c >= 0x09 && c <= 0x0D)) t[c] = kSpace;
    if (c == '\r' || c == '\n') t[c] = kSpace | kCrLf;
  }
  return t;
}
constexpr std::array<uint8_t, 128> kAscii = make_ascii_classes();

uint8_t class_of(char32_t cp) {
  if (cp < 0x80) return kAscii[cp];
  if (is_white_space(cp)) return kSpace;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return kLetter;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return kNumber;
    default:
      return 0;
  }
}

struct Char {
  uint8_t cls;
  uint8_t len;
};

inline Char char_at(Ptr p) {
  if (*p < 0x80) return {kAscii[*p], 1};
  Ptr q = p;
  char32_t cp = next_code_point(q);
  return {class_of(cp), static_cast<uint8_t>(q - p)};
}

// Anything that is neither \s, \p{L} nor \p{N}.
inline bool is_other(uint8_t cls) {
  return (cls & (kLetter | kNumber | kSpace)) == 0;
}

template <uint8_t kWant>
Ptr skip_class(Ptr p, Ptr end) {
  while (p < end) {
    Char c = char_at(p);
    if (!(c.cls & kWant)) break;
    p += c.len;
  }
  return p;
}

Ptr skip_others(Ptr p, Ptr end) {
  while (p < end) {
    Char c = char_at(p);
    if (!is_other(c.cls)) break;
    p += c.len;
  }
  return p;
}

// The ASCII letter at p, lowered when `fold`, and its byte length; 0 when there is none.
// note: under (?i) both Oniguruma and PCRE2 use Unicode case folding, so U+017F LATIN SMALL LETTER
// LONG S matches 's'. No other code point folds onto the letters of the contractions.
inline int letter_at(Ptr p, Ptr end, bool fold, int* len) {
  if (p >= end) return 0;
  if (*p < 0x80) {
    *len = 1;
    int c = *p;
    return fold && c >= 'A' && c <= 'Z' ? c + 32 : c;
  }
  if (fold && p + 1 < end && p[0] == 0xC5 && p[1] == 0xBF) {
    *len = 2;
    return 's';
  }
  return 0;
}

// 's|'t|'re|'ve|'m|'ll|'d at p (which holds '\''), case-insensitive when `fold`; returns the
// match length or 0.
size_t contraction(Ptr p, Ptr end, bool fold) {
  int n1 = 0, n2 = 0;
  int c1 = letter_at(p + 1, end, fold, &n1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 1 + n1;
  if (c1 != 'r' && c1 != 'v' && c1 != 'l') return 0;
  int c2 = letter_at(p + 1 + n1, end, fold, &n2);
  if ((c1 == 'l' && c2 == 'l') || (c1 != 'l' && c2 == 'e')) return 1 + n1 + n2;
  return 0;
}

// The whitespace alternatives shared by all three patterns, at p (a \s character):
// `\s*[\r\n]+` (only when `crlf_rule`), then `\s+(?!\S)`, then `\s+`.
Ptr match_space(Ptr p, Ptr end, bool crlf_rule) {
  Ptr q = p, last = p, after_crlf = nullptr;
  while (q < end) {
    Char c = char_at(q);
    if (!(c.cls & kSpace)) break;
    if (c.cls & kCrLf) after_crlf = q + 1;
    last = q;
    q += c.len;
  }
  // \s* backtracks until [\r\n]+ can match: the piece ends after the run's last \r or \n.
  if (crlf_rule && after_crlf) return after_crlf;
  if (q == end) return q;  // (?!\S) holds at the end of text
  // note: followed by \S, \s+ backs off one character so that the lookahead sees a space; a single
  // space fails (?!\S) and falls through to plain \s+.
  return last > p ? last : q;
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}|
//  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
Ptr match_qwen(Ptr p, Ptr end, int max_digits) {
  if (*p == '\'') {
    if (size_t n = contraction(p, end, true)) return p + n;
  }
  Char c0 = char_at(p);
  Ptr p1 = p + c0.len;
  if (c0.cls & kLetter) return skip_class<kLetter>(p1, end);
  if (!(c0.cls & (kNumber | kCrLf)) && p1 < end) {
    Char c1 = char_at(p1);
    if (c1.cls & kLetter) return skip_class<kLetter>(p1 + c1.len, end);
  }
  if (c0.cls & kNumber) {
    Ptr q = p1;
    for (int k = 1; k < max_digits && q < end; ++k) {
      Char c = char_at(q);
      if (!(c.cls & kNumber)) break;
      q += c.len;
    }
    return q;
  }
  Ptr q = nullptr;
  if (is_other(c0.cls)) {
    q = p1;
  } else if (*p == ' ' && p1 < end) {
    Char c1 = char_at(p1);
    if (is_other(c1.cls)) q = p1 + c1.len;
  }
  if (q) {
    q = skip_others(q, end);
    while (q < end && (*q == '\r' || *q == '\n')) ++q;
    return q;
  }
  return match_space(p, end, true);  // c0 is \s here
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
Ptr match_gpt2(Ptr p, Ptr end) {
  if (*p == '\'') {
    if (size_t n = contraction(p, end, false)) return p + n;
  }
  Char c = char_at(p);
  Ptr start = p;
  if (*p == ' ' && p + 1 < end) {  // the optional leading space joins a following non-space run
    Char c1 = char_at(p + 1);
    if (!(c1.cls & kSpace)) {
      c = c1;
      start = p + 1;
    }
  }
  if (c.cls & kLetter) return skip_class<kLetter>(start + c.len, end);
  if (c.cls & kNumber) return skip_class<kNumber>(start + c.len, end);
  if (is_other(c.cls)) return skip_others(start + c.len, end);
  return match_space(p, end, false);
}

}  // namespace

GgufPreTokenizer pre_tokenizer_for_gguf_pre(std::string_view name) {
  const auto is = [&](std::initializer_list<std::string_view> names) {
    for (std::string_view n : names)
      if (n == name) return true;
    return false;
  };
  GgufPreTokenizer p;
  if (is({"qwen2", "deepseek-r1-qwen", "megrez"})) {
    p.splits = {std::string(kQwen2Pattern)};
    p.nfc = true;  // Qwen2/2.5/3's tokenizer.json normalizer
  } else if (is({"qwen35"})) {
    p.splits = {std::string(kQwen35Pattern)};
  } else if (is({"llama-bpe", "llama3", "llama-v3", "smaug-bpe", "dbrx"})) {
    p.splits = {std::string(kLlama3Pattern)};
    p.ignore_merges = true;  // as llama.cpp and Llama 3's tokenizer.json
  } else if (is({"glm4", "chatglm-bpe"})) {
    // GLM-4 / 4.5 / 4.6: llama.cpp's CHATGLM4 split (the Llama 3 pattern), no ignore_merges.
    p.splits = {std::string(kLlama3Pattern)};
  } else if (is({"gpt-4o", "llama4"})) {
    p.splits = {std::string(kGpt4oPattern)};
    p.ignore_merges = true;  // gpt-oss's tokenizer.json (tiktoken ranks: the same ids either way)
  } else if (is({"deepseek-v3"})) {
    for (std::string_view s : kDeepseekV3Patterns) p.splits.emplace_back(s);
  } else if (is({"gpt-2", "gpt2", "phi-2", "roberta-bpe"})) {
    p.splits = {std::string(kGpt2Pattern)};
  }
  return p;
}

std::string gguf_pre_for_splits(const std::vector<std::string>& splits) {
  for (const char* name : {"qwen2", "qwen35", "llama-bpe", "gpt-4o", "deepseek-v3", "gpt-2"})
    if (pre_tokenizer_for_gguf_pre(name).splits == splits) return name;
  return "";
}

PreTokenizer::PreTokenizer(Kind kind, std::string_view pattern) : kind_(kind) {
  if (kind == Kind::kRegex) regex_.emplace_back(pattern);
}

PreTokenizer::PreTokenizer(std::string_view pattern)
    : PreTokenizer(pattern.empty() || pattern == kQwen2Pattern ? Kind::kQwen2
                   : pattern == kLlama3Pattern                 ? Kind::kLlama3
                   : pattern == kGpt2Pattern                   ? Kind::kGpt2
                                                               : Kind::kRegex,
                   pattern) {}

PreTokenizer PreTokenizer::regex_only(std::string_view pattern) {
  return PreTokenizer(Kind::kRegex, pattern.empty() ? kQwen2Pattern : pattern);
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces,
                         const SplitBudget* budget) const {
  if (kind_ == Kind::kRegex) {
    regex_.front().split(text, pieces, budget);
    return;
  }
  Ptr begin = reinterpret_cast<Ptr>(text.data());
  Ptr end = begin + text.size();
  for (Ptr p = begin; p < end;) {
    Ptr q = kind_ == Kind::kGpt2    ? match_gpt2(p, end)
            : kind_ == Kind::kQwen2 ? match_qwen(p, end, 1)
                                    : match_qwen(p, end, 3);
    pieces.push_back(text.substr(p - begin, q - p));
    p = q;
  }
}

void PreTokenizer::find_matches(std::string_view text, std::vector<RegexSplitter::Part>& parts,
                                const SplitBudget* budget) const {
  if (kind_ == Kind::kRegex) return regex_.front().find_matches(text, parts, budget);
  if (text.empty()) {
    parts.push_back({0, 0, false});
    return;
  }
  std::vector<std::string_view> pieces;
  split(text, pieces, budget);
  for (std::string_view p : pieces) {
    const size_t begin = size_t(p.data() - text.data());
    parts.push_back({begin, begin + p.size(), true});
  }
}

}  // namespace fak
