// Reading an ECMA-262 pattern into a Regex (the subset and its refusals are in regex.h): a
// recursive descent over the pattern's code points.
#include <algorithm>
#include <string>

#include "core/error.h"
#include "grammar/regex.h"

namespace fak::grammar {

namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr size_t kMaxPatternChars = 10000;
constexpr int kMaxGroupNesting = 100;

void normalize(CodeRanges& ranges) {
  std::sort(ranges.begin(), ranges.end());
  CodeRanges out;
  for (const auto& r : ranges) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  // Surrogates are not characters: a decoded JSON string never holds one alone.
  CodeRanges clean;
  for (const auto& [lo, hi] : out) {
    if (hi < 0xD800 || lo > 0xDFFF) {
      clean.push_back({lo, hi});
      continue;
    }
    if (lo < 0xD800) clean.push_back({lo, 0xD7FF});
    if (hi > 0xDFFF) clean.push_back({0xE000, hi});
  }
  ranges = std::move(clean);
}

CodeRanges complement(const CodeRanges& set) {
  CodeRanges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : set) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  normalize(out);
  return out;
}

CodeRanges digit_set() {
  return {{'0', '9'}};
}
CodeRanges word_set() {
  return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
}
// ECMA-262 WhiteSpace and LineTerminator.
CodeRanges space_set() {
  CodeRanges s = {{0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680},
                  {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                  {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
  return s;
}
CodeRanges dot_set() {
  return complement({{0x0A, 0x0A}, {0x0D, 0x0D}, {0x2028, 0x2029}});
}

bool is_hex(uint32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
uint32_t hex_value(uint32_t c) {
  return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
}
bool is_alnum(uint32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

RegexNode chars_node(CodeRanges set) {
  RegexNode n;
  n.kind = RegexNode::kChars;
  normalize(set);
  n.chars = std::move(set);
  return n;
}

// One escape or class item: a single character (ranges may use it) or a set (\d and kin).
struct Atom {
  bool single = true;
  uint32_t c = 0;
  CodeRanges set;
};

class Parser {
 public:
  explicit Parser(std::string_view pattern) : source_(pattern) {
    decode(pattern);
    if (text_.size() > kMaxPatternChars)
      fail_here("longer than " + std::to_string(kMaxPatternChars) + " characters");
  }

  Regex parse() {
    Regex regex;
    regex.branches = alternatives(Context::kTop);
    if (!at_end()) fail_here("unbalanced ')'");
    return regex;
  }

 private:
  enum class Context { kTop, kLookahead, kGroup };

  [[noreturn]] void fail_here(const std::string& what) const {
    fail("'pattern' \"" + std::string(source_) + "\", character " + std::to_string(pos_ + 1) +
         ": " + what);
  }

  void decode(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
      const auto b = uint8_t(s[i]);
      const int n = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
      uint32_t c = n == 1 ? b : n == 2 ? b & 0x1F : n == 3 ? b & 0x0F : b & 0x07;
      if (i + size_t(n) > s.size()) fail_here("not valid UTF-8");
      for (int k = 1; k < n; ++k) c = c << 6 | (uint8_t(s[i + size_t(k)]) & 0x3F);
      if (c > kMaxCodePoint || (c >= 0xD800 && c <= 0xDFFF)) fail_here("not valid UTF-8");
      text_.push_back(c);
      i += size_t(n);
    }
  }

  bool at_end() const { return pos_ >= text_.size(); }
  bool peek(uint32_t c, size_t ahead = 0) const {
    return pos_ + ahead < text_.size() && text_[pos_ + ahead] == c;
  }
  bool peek_text(std::string_view s) const {
    for (size_t k = 0; k < s.size(); ++k)
      if (!peek(uint8_t(s[k]), k)) return false;
    return true;
  }
  bool eat(uint32_t c) {
    if (!peek(c)) return false;
    ++pos_;
    return true;
  }
  bool eat_text(std::string_view s) {
    if (!peek_text(s)) return false;
    pos_ += s.size();
    return true;
  }
  uint32_t next() {
    if (at_end()) fail_here("unexpected end");
    return text_[pos_++];
  }

  std::vector<RegexBranch> alternatives(Context context) {
    std::vector<RegexBranch> out;
    do {
      out.push_back(branch(context));
    } while (eat('|'));
    return out;
  }

  RegexBranch branch(Context context) {
    RegexBranch b;
    if (peek('^') && context == Context::kTop) {
      ++pos_;
      b.anchored_start = true;
      while (peek_text("(?=") || peek_text("(?!")) b.lookaheads.push_back(lookahead());
    }
    b.body = sequence(context, b.anchored_end);
    return b;
  }

  RegexLookahead lookahead() {
    RegexLookahead la;
    pos_ += 2;
    la.negative = next() == '!';
    la.branches = alternatives(Context::kLookahead);
    if (!eat(')')) fail_here("missing ')'");
    return la;
  }

  RegexNode sequence(Context context, bool& anchored_end) {
    RegexNode seq;
    seq.kind = RegexNode::kConcat;
    while (!at_end() && !peek('|') && !peek(')')) {
      if (peek('$')) {
        ++pos_;
        const bool at_branch_end = at_end() || peek('|') || peek(')');
        if (context != Context::kGroup && at_branch_end &&
            (context == Context::kLookahead || !peek(')'))) {
          anchored_end = true;
          break;
        }
        --pos_;
        fail_here("'$' is only supported at the end of the pattern or of a top-level alternative");
      }
      if (peek('^'))
        fail_here(
            "'^' is only supported at the start of the pattern or of a top-level alternative");
      RegexNode item = atom();
      quantifier(item);
      seq.children.push_back(std::move(item));
    }
    return seq;
  }

  RegexNode atom() {
    const size_t start = pos_;
    const uint32_t c = next();
    switch (c) {
      case '.':
        return chars_node(dot_set());
      case '(':
        return group();
      case '[':
        return chars_node(char_class());
      case '\\': {
        Atom a = escape(false);
        return chars_node(a.single ? CodeRanges{{a.c, a.c}} : a.set);
      }
      case '*':
      case '+':
      case '?':
        pos_ = start;
        fail_here("nothing to repeat");
      case '{': {
        pos_ = start;
        uint32_t lo, hi;
        if (counted(lo, hi)) fail_here("nothing to repeat");
        fail_here("'{' that does not start a quantifier must be escaped as '\\{'");
      }
      default:
        return chars_node({{c, c}});
    }
  }

  RegexNode group() {
    if (peek_text("?=") || peek_text("?!")) {
      --pos_;
      fail_here("lookahead is only supported right after a leading '^'");
    }
    if (peek_text("?<=") || peek_text("?<!")) {
      --pos_;
      fail_here("lookbehind is not supported");
    }
    if (eat_text("?:")) {
      // non-capturing: the same language
    } else if (eat_text("?<")) {
      while (!at_end() && !peek('>')) ++pos_;
      if (!eat('>')) fail_here("unterminated group name");
    } else if (peek('?')) {
      --pos_;
      fail_here("unsupported group syntax '(?'");
    }
    if (++depth_ > kMaxGroupNesting) fail_here("groups nested too deeply");
    std::vector<RegexBranch> branches = alternatives(Context::kGroup);
    --depth_;
    if (!eat(')')) fail_here("missing ')'");
    if (branches.size() == 1) return std::move(branches[0].body);
    RegexNode alt;
    alt.kind = RegexNode::kAlternation;
    for (auto& b : branches) alt.children.push_back(std::move(b.body));
    return alt;
  }

  // {m}, {m,}, {m,n} at pos_ (on the '{'); consumes it only when it is one.
  bool counted(uint32_t& lo, uint32_t& hi) {
    size_t p = pos_ + 1;
    const auto number = [&](uint32_t& out) {
      const size_t begin = p;
      uint64_t v = 0;
      while (p < text_.size() && text_[p] >= '0' && text_[p] <= '9') {
        v = std::min<uint64_t>(v * 10 + (text_[p] - '0'), uint64_t(1) << 32);
        ++p;
      }
      out = uint32_t(std::min<uint64_t>(v, kUnboundedRepeat - 1));
      return p > begin;
    };
    if (!number(lo)) return false;
    hi = lo;
    if (p < text_.size() && text_[p] == ',') {
      ++p;
      if (!number(hi)) hi = kUnboundedRepeat;
    }
    if (p >= text_.size() || text_[p] != '}') return false;
    pos_ = p + 1;
    return true;
  }

  void quantifier(RegexNode& item) {
    const size_t start = pos_;
    uint32_t lo = 0, hi = 0;
    if (eat('*')) {
      hi = kUnboundedRepeat;
    } else if (eat('+')) {
      lo = 1;
      hi = kUnboundedRepeat;
    } else if (eat('?')) {
      hi = 1;
    } else if (!(peek('{') && counted(lo, hi))) {
      return;
    }
    if (hi != kUnboundedRepeat && lo > hi) {
      pos_ = start;
      fail_here("numbers out of order in {} quantifier");
    }
    if (std::max(lo, hi == kUnboundedRepeat ? 0 : hi) > kMaxRepeat) {
      pos_ = start;
      fail_here("repetition counts above " + std::to_string(kMaxRepeat) + " are not supported");
    }
    if (peek('?')) fail_here("lazy quantifiers (a '?' after a quantifier) are not supported");
    uint32_t a, b;
    if (peek('*') || peek('+') || (peek('{') && counted(a, b))) fail_here("nothing to repeat");
    RegexNode repeat;
    repeat.kind = RegexNode::kRepeat;
    repeat.min = lo;
    repeat.max = hi;
    repeat.children.push_back(std::move(item));
    item = std::move(repeat);
  }

  CodeRanges char_class() {
    const bool negate = eat('^');
    CodeRanges set;
    for (;;) {
      if (at_end()) fail_here("missing ']'");
      if (eat(']')) break;
      Atom a = class_atom();
      if (peek('-') && !peek(']', 1) && pos_ + 1 < text_.size()) {
        ++pos_;
        const size_t at = pos_;
        Atom b = class_atom();
        if (!a.single || !b.single) {
          pos_ = at;
          fail_here("a range in a class cannot start or end with a class escape such as \\d");
        }
        if (a.c > b.c) {
          pos_ = at;
          fail_here("range out of order in character class");
        }
        set.push_back({a.c, b.c});
        continue;
      }
      if (a.single) {
        set.push_back({a.c, a.c});
      } else {
        set.insert(set.end(), a.set.begin(), a.set.end());
      }
    }
    normalize(set);
    return negate ? complement(set) : set;
  }

  Atom class_atom() {
    const uint32_t c = next();
    if (c != '\\') return {true, c, {}};
    if (eat('b')) return {true, 0x08, {}};
    if (eat('-')) return {true, '-', {}};
    return escape(true);
  }

  // After a backslash.
  Atom escape(bool in_class) {
    if (at_end()) fail_here("pattern ends with '\\'");
    const size_t start = pos_ - 1;
    const uint32_t c = next();
    const auto set = [](CodeRanges s) { return Atom{false, 0, std::move(s)}; };
    const auto one = [](uint32_t x) { return Atom{true, x, {}}; };
    switch (c) {
      case 'd':
        return set(digit_set());
      case 'D':
        return set(complement(digit_set()));
      case 'w':
        return set(word_set());
      case 'W':
        return set(complement(word_set()));
      case 's':
        return set(space_set());
      case 'S':
        return set(complement(space_set()));
      case 'n':
        return one(0x0A);
      case 'r':
        return one(0x0D);
      case 't':
        return one(0x09);
      case 'v':
        return one(0x0B);
      case 'f':
        return one(0x0C);
      case '0':
        if (!at_end() && text_[pos_] >= '0' && text_[pos_] <= '9') {
          pos_ = start;
          fail_here("octal escapes are not supported");
        }
        return one(0);
      case 'x': {
        if (pos_ + 2 > text_.size() || !is_hex(text_[pos_]) || !is_hex(text_[pos_ + 1])) {
          pos_ = start;
          fail_here("\\x needs two hex digits");
        }
        const uint32_t v = hex_value(text_[pos_]) << 4 | hex_value(text_[pos_ + 1]);
        pos_ += 2;
        return one(v);
      }
      case 'u':
        return one(unicode_escape(start));
      case 'c':
        if (!at_end() && ((text_[pos_] | 0x20) >= 'a' && (text_[pos_] | 0x20) <= 'z'))
          return one(next() % 32);
        pos_ = start;
        fail_here("\\c needs a letter");
      case 'p':
      case 'P':
        pos_ = start;
        fail_here("Unicode property escapes (\\p{...}, \\P{...}) are not supported");
      case 'k':
        pos_ = start;
        fail_here("named backreferences (\\k<...>) are not supported");
      case 'b':
      case 'B':
        pos_ = start;
        fail_here(in_class ? "\\B is not valid in a class"
                           : "word boundary assertions (\\b, \\B) are not supported");
      default:
        break;
    }
    if (c >= '1' && c <= '9') {
      pos_ = start;
      fail_here("backreferences (\\1 ...) are not supported");
    }
    if (is_alnum(c)) {
      pos_ = start;
      fail_here(std::string("unknown escape '\\") + char(c) + "'");
    }
    return one(c);  // \. \* \/ \- ...: the character itself
  }

  // After "\u": {H...} or HHHH, a high surrogate escape joined with a following low one.
  uint32_t unicode_escape(size_t start) {
    if (eat('{')) {
      uint32_t v = 0;
      size_t digits = 0;
      while (!at_end() && is_hex(text_[pos_]) && digits < 8) {
        v = v << 4 | hex_value(next());
        ++digits;
      }
      if (digits == 0 || !eat('}') || v > kMaxCodePoint) {
        pos_ = start;
        fail_here("bad \\u{...} escape");
      }
      if (v >= 0xD800 && v <= 0xDFFF) {
        pos_ = start;
        fail_here("a lone surrogate is not a character");
      }
      return v;
    }
    const auto four = [&](uint32_t& out) {
      if (pos_ + 4 > text_.size()) return false;
      out = 0;
      for (size_t k = 0; k < 4; ++k) {
        if (!is_hex(text_[pos_ + k])) return false;
        out = out << 4 | hex_value(text_[pos_ + k]);
      }
      pos_ += 4;
      return true;
    };
    uint32_t v;
    if (!four(v)) {
      pos_ = start;
      fail_here("\\u needs four hex digits");
    }
    if (v >= 0xD800 && v <= 0xDBFF && peek_text("\\u")) {
      const size_t back = pos_;
      pos_ += 2;
      uint32_t low;
      if (four(low) && low >= 0xDC00 && low <= 0xDFFF)
        return 0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00);
      pos_ = back;
    }
    if (v >= 0xD800 && v <= 0xDFFF) {
      pos_ = start;
      fail_here("a lone surrogate is not a character");
    }
    return v;
  }

  std::string_view source_;
  std::vector<uint32_t> text_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Regex parse_regex(std::string_view pattern) {
  return Parser(pattern).parse();
}

}  // namespace fak::grammar
