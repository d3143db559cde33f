// PCRE2 split; see regex_split.h.
#include "tokenizer/regex_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "core/error.h"

namespace fak {
namespace {

// Unicode White_Space, as Oniguruma's \s (without the brackets, so it also fits inside a class).
constexpr std::string_view kWhiteSpace =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  int n = pcre2_get_error_message(code, buf, sizeof buf);
  return n < 0 ? "error " + std::to_string(code) : std::string(reinterpret_cast<char*>(buf));
}

pcre2_code* code_of(const std::shared_ptr<void>& p) {
  return static_cast<pcre2_code*>(p.get());
}

// Byte length of the UTF-8 character whose lead byte is c (the text is valid).
size_t char_len(unsigned char c) {
  return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

}  // namespace

std::string onig_to_pcre2(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char x = pattern[++i];
      if (x == 'Q') {  // \Q...\E quotes literally: copy it untouched
        size_t end = pattern.find("\\E", i + 1);
        end = end == std::string_view::npos ? pattern.size() : end + 2;
        out.append("\\Q").append(pattern.substr(i + 1, end - i - 1));
        i = end - 1;
      } else if (x == 's') {
        if (in_class) {
          out.append(kWhiteSpace);
        } else {
          out.append("[").append(kWhiteSpace).append("]");
        }
      } else if (x == 'S' && !in_class) {
        out.append("[^").append(kWhiteSpace).append("]");
      } else {
        out += '\\';
        out += x;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];  // literal ]
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      size_t end = pattern.find(":]", i + 2);  // POSIX class such as [:alpha:]
      if (end != std::string_view::npos) {
        out.append(pattern.substr(i, end + 2 - i));
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

std::string regex_escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 static_cast<unsigned char>(c) >= 0x80;
    if (!plain) out += '\\';
    out += c;
  }
  return out;
}

SplitBudget SplitBudget::for_text(size_t bytes) {
  SplitBudget b;
  b.text_bytes = bytes;
  b.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(100) +
               std::chrono::microseconds(2) * std::min<size_t>(bytes, size_t(1) << 40);
  return b;
}

bool RegexSplitter::matches_empty() const {
  pcre2_code* code = code_of(code_);
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
  return md && pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(""), 0, 0, 0, md.get(), nullptr) >= 0;
}

RegexSplitter::RegexSplitter(std::string_view pattern) : pattern_(pattern) {
  std::string translated = onig_to_pcre2(pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (!code) {
    fail("pre-tokenizer regex does not compile (" + pcre2_message(err) + " at offset " +
         std::to_string(offset) + "): " + std::string(pattern));
  }
  // note: JIT is an optimisation only; when it is unavailable pcre2_match interprets instead.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ =
      std::shared_ptr<void>(code, [](void* p) { pcre2_code_free(static_cast<pcre2_code*>(p)); });
}

void RegexSplitter::find_matches(std::string_view text, std::vector<Part>& parts,
                                 const SplitBudget* budget) const {
  if (text.empty()) {
    parts.push_back({0, 0, false});
    return;
  }
  pcre2_code* code = code_of(code_);
  // Per-call match state keeps one RegexSplitter usable from many threads at once.
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
  std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)> ctx(
      pcre2_match_context_create(nullptr), &pcre2_match_context_free);
  std::unique_ptr<pcre2_jit_stack, decltype(&pcre2_jit_stack_free)> stack(
      pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr), &pcre2_jit_stack_free);
  if (!md || !ctx || !stack) fail("pre-tokenizer regex: out of memory");
  pcre2_jit_stack_assign(ctx.get(), nullptr, stack.get());
  // Bounds catastrophic backtracking in one call; the budget bounds the calls together.
  pcre2_set_match_limit(ctx.get(), 2'000'000);
  pcre2_set_depth_limit(ctx.get(), 1'000'000);

  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t n = text.size(), prev = 0, pos = 0;
  bool after_match = false;  // pos is the end of a non-empty match
  while (pos <= n) {
    // note: Oniguruma's find_iter (HF) takes no empty match right where the previous match ended.
    const uint32_t options = PCRE2_NO_UTF_CHECK | (after_match ? PCRE2_NOTEMPTY_ATSTART : 0);
    int rc = pcre2_match(code, subject, n, pos, options, md.get(), ctx.get());
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail("pre-tokenizer regex failed on the input: " + pcre2_message(rc));
    if (budget && std::chrono::steady_clock::now() > budget->deadline) {
      fail("the tokenizer's split pattern ran past its time budget on " +
           std::to_string(budget->text_bytes) +
           " bytes of text (a pattern that backtracks?): " + pattern_.substr(0, 80));
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    size_t s = ov[0], e = ov[1];
    if (e < s || e > n || s < prev) break;  // \K in a lookahead can report such a match: stop
    if (s > prev) parts.push_back({prev, s, false});
    parts.push_back({s, e, true});
    prev = e;
    // After an empty match the search moves on by one character, as Oniguruma's find_iter does
    // in HF.
    after_match = e > s;
    pos = e > s ? e : (s >= n ? n + 1 : s + char_len(static_cast<unsigned char>(text[s])));
  }
  if (prev < n) parts.push_back({prev, n, false});
}

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& pieces,
                          const SplitBudget* budget) const {
  std::vector<Part> parts;
  find_matches(text, parts, budget);
  for (const Part& p : parts)
    if (p.end > p.begin) pieces.push_back(text.substr(p.begin, p.end - p.begin));
}

}  // namespace fak
