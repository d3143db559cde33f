// Normalizer steps; see normalize.h.
#include "tokenizer/normalize.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace fak {

namespace {

using Ptr = const unsigned char*;

std::u32string decode(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (Ptr p = reinterpret_cast<Ptr>(text.data()), end = p + text.size(); p < end;)
    out.push_back(next_code_point(p));
  return out;
}

std::string encode(const std::u32string& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append_utf8(out, cp);
  return out;
}

std::string utf8proc_form(std::string_view text, int options) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          utf8proc_ssize_t(text.size()), &out,
                                          utf8proc_option_t(options | UTF8PROC_STABLE));
  if (n < 0) fail(std::string("normalizer: ") + utf8proc_errmsg(n));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), size_t(n));
}

// Unicode's Case_Ignorable, approximated by the categories that make it up (marks, format
// characters, modifier letters and symbols) plus the apostrophes and the dot-like punctuation the
// property lists: enough for the final-sigma rule.
bool is_case_ignorable(char32_t cp) {
  if (cp == '\'' || cp == '.' || cp == ':' || cp == '^' || cp == '`' || cp == 0xB7 ||
      cp == 0x2019 || cp == 0x2027)
    return true;
  switch (utf8proc_category(utf8proc_int32_t(cp))) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK:
      return true;
    default:
      return false;
  }
}

bool is_cased(char32_t cp) {
  const auto c = utf8proc_category(utf8proc_int32_t(cp));
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
         utf8proc_tolower(utf8proc_int32_t(cp)) != utf8proc_int32_t(cp) ||
         utf8proc_toupper(utf8proc_int32_t(cp)) != utf8proc_int32_t(cp);
}

bool is_mark(char32_t cp) {
  switch (utf8proc_category(utf8proc_int32_t(cp))) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
      return true;
    default:
      return false;
  }
}

}  // namespace

std::string rust_lowercase(std::string_view text) {
  const std::u32string cps = decode(text);
  std::u32string out;
  out.reserve(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t cp = cps[i];
    if (cp < 0x80) {
      out.push_back(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    } else if (cp == 0x130) {  // SpecialCasing: İ -> i + COMBINING DOT ABOVE
      out.push_back('i');
      out.push_back(0x307);
    } else if (cp == 0x3A3) {
      // Final sigma: after a cased letter and not before one (case-ignorables skipped).
      size_t b = i;
      while (b > 0 && is_case_ignorable(cps[b - 1])) --b;
      size_t a = i + 1;
      while (a < cps.size() && is_case_ignorable(cps[a])) ++a;
      const bool final = b > 0 && is_cased(cps[b - 1]) && !(a < cps.size() && is_cased(cps[a]));
      out.push_back(final ? 0x3C2 : 0x3C3);
    } else {
      out.push_back(char32_t(utf8proc_tolower(utf8proc_int32_t(cp))));
    }
  }
  return encode(out);
}

Normalizer::Normalizer(std::vector<NormalizerStep> steps) : steps_(std::move(steps)) {
  for (const NormalizerStep& s : steps_)
    if (s.kind == NormalizerStep::Kind::Replace) {
      patterns_.emplace_back(s.regex ? s.pattern : regex_escape(s.pattern));
      // note: HF tokenizers panics on such a Replace (normalizer.rs): no answer to follow.
      if (patterns_.back().matches_empty())
        fail("normalizer Replace with a pattern that matches the empty string (" + s.pattern +
             ") is not supported");
    }
}

std::string Normalizer::apply(std::string_view text, const SplitBudget* budget) const {
  using Kind = NormalizerStep::Kind;
  std::string s(text);
  size_t replace = 0;
  for (const NormalizerStep& step : steps_) {
    switch (step.kind) {
      case Kind::NFC:
        if (!nfc_is_trivial(s)) s = nfc(s);
        break;
      case Kind::NFD:
        s = utf8proc_form(s, UTF8PROC_DECOMPOSE);
        break;
      case Kind::NFKC:
        s = utf8proc_form(s, UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
        break;
      case Kind::NFKD:
        s = utf8proc_form(s, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
        break;
      case Kind::Lowercase:
        s = rust_lowercase(s);
        break;
      case Kind::Strip: {
        const std::u32string cps = decode(s);
        size_t b = 0, e = cps.size();
        if (step.left)
          while (b < e && is_white_space(cps[b])) ++b;
        if (step.right)
          while (e > b && is_white_space(cps[e - 1])) --e;
        s = encode(cps.substr(b, e - b));
        break;
      }
      case Kind::StripAccents: {
        std::u32string cps = decode(s);
        std::erase_if(cps, is_mark);
        s = encode(cps);
        break;
      }
      case Kind::Replace: {
        std::vector<RegexSplitter::Part> parts;
        patterns_[replace++].find_matches(s, parts, budget);
        std::string out;
        out.reserve(s.size());
        for (const auto& p : parts)
          out.append(p.match ? std::string_view(step.content)
                             : std::string_view(s).substr(p.begin, p.end - p.begin));
        s = std::move(out);
        break;
      }
      case Kind::Prepend:
        if (!s.empty()) s = step.content + s;
        break;
    }
  }
  return s;
}

}  // namespace fak
