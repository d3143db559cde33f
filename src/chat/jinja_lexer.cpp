// Jinja lexer. The whitespace rules follow jinja2/lexer.py (tokeniter) closely because they decide
// rendered bytes: lstrip only applies when the text since the last newline is pure whitespace and
// either contains a newline or the previous tag ended a line.
#include "chat/jinja_lexer.h"

#include <cstring>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace fak::jinja {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_ident(char c) {
  return is_ident_start(c) || is_digit(c);
}

void rstrip(std::string& s) {
  while (!s.empty() && is_space(s.back())) s.pop_back();
}

size_t skip_space(std::string_view s, size_t p) {
  while (p < s.size() && is_space(s[p])) ++p;
  return p;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  Lexer(std::string_view src, const LexOptions& opt) : src_(src), opt_(opt) {}

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t tag = find_tag(pos);
      if (tag == std::string_view::npos) {
        push_text(std::string(src_.substr(pos)), pos);
        break;
      }
      char type = src_[tag + 1];
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : 0;
      if (sign != '-' && sign != '+') sign = 0;
      std::string text(src_.substr(pos, tag - pos));
      if (sign == '-') {
        rstrip(text);
      } else if (sign != '+' && opt_.lstrip_blocks && type != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0 || line_starting) {
          bool all_space = true;
          for (size_t i = l_pos; i < text.size(); ++i) all_space &= is_space(text[i]);
          if (all_space) text.resize(l_pos);
        }
      }
      push_text(std::move(text), pos);
      size_t p = tag + 2 + (sign ? 1 : 0);
      if (type == '#') {
        pos = lex_comment(tag, p);
      } else if (type == '%' && try_raw(tag, p, pos)) {
        // pos set by try_raw
      } else {
        pos = lex_tag(tag, type, p);
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    Token eof{Token::Kind::Eof, "", 0, 0, src_.size()};
    out_.push_back(eof);
    return std::move(out_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t p = src_.find('{', from); p != std::string_view::npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) {
        return p;
      }
    }
    return std::string_view::npos;
  }

  void push_text(std::string text, size_t pos) {
    if (text.empty()) return;
    out_.push_back(Token{Token::Kind::Text, std::move(text), 0, 0, pos});
  }

  // After a block/comment end: `-` eats all following whitespace, `+` nothing, otherwise
  // trim_blocks eats one newline.
  size_t after_block_end(size_t pos, char sign) const {
    if (sign == '-') return skip_space(src_, pos);
    if (sign != '+' && opt_.trim_blocks && pos < src_.size() && src_[pos] == '\n') return pos + 1;
    return pos;
  }

  size_t lex_comment(size_t tag, size_t p) {
    size_t end = src_.find("#}", p);
    if (end == std::string_view::npos) syntax_error(src_, tag, "unclosed comment '{#'");
    char sign = end > p && src_[end - 1] == '-' ? '-' : 0;
    return after_block_end(end + 2, sign);
  }

  // Matches `[ws]name[ws][-+]%}` at p; returns the position after `%}` and the sign, or npos.
  size_t match_simple_tag(size_t p, const char* name, char* sign) const {
    p = skip_space(src_, p);
    size_t n = std::strlen(name);
    if (src_.compare(p, n, name) != 0) return std::string_view::npos;
    p += n;
    if (p < src_.size() && is_ident(src_[p])) return std::string_view::npos;
    p = skip_space(src_, p);
    *sign = 0;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) *sign = src_[p++];
    if (src_.compare(p, 2, "%}") != 0) return std::string_view::npos;
    return p + 2;
  }

  bool try_raw(size_t tag, size_t p, size_t& pos) {
    char sign = 0;
    size_t body = match_simple_tag(p, "raw", &sign);
    if (body == std::string_view::npos) return false;
    // note: jinja2's raw-begin rule honours `-%}` but not trim_blocks.
    if (sign == '-') body = skip_space(src_, body);
    for (size_t q = src_.find("{%", body); q != std::string_view::npos;
         q = src_.find("{%", q + 2)) {
      size_t r = q + 2;
      char begin_sign = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) begin_sign = src_[r++];
      char end_sign = 0;
      size_t end = match_simple_tag(r, "endraw", &end_sign);
      if (end == std::string_view::npos) continue;
      std::string text(src_.substr(body, q - body));
      if (begin_sign == '-') rstrip(text);
      push_text(std::move(text), body);
      pos = after_block_end(end, end_sign);
      return true;
    }
    syntax_error(src_, tag, "unclosed '{% raw %}' block (missing '{% endraw %}')");
  }

  size_t lex_tag(size_t tag, char type, size_t p) {
    bool var = type == '{';
    out_.push_back(Token{var ? Token::Kind::VarBegin : Token::Kind::BlockBegin, "", 0, 0, tag});
    const char* closing = var ? "}}" : "%}";
    std::vector<size_t> balance;  // positions of open brackets
    while (true) {
      p = skip_space(src_, p);
      if (p >= src_.size()) {
        syntax_error(
            src_, tag,
            std::string("unclosed tag '") + (var ? "{{" : "{%") + "', expected '" + closing + "'");
      }
      if (balance.empty()) {
        char sign = 0;
        size_t q = p;
        if (src_[q] == '-' || (!var && src_[q] == '+')) sign = src_[q++];
        if (src_.compare(q, 2, closing) == 0) {
          out_.push_back(Token{var ? Token::Kind::VarEnd : Token::Kind::BlockEnd, "", 0, 0, p});
          if (var) return sign == '-' ? skip_space(src_, q + 2) : q + 2;
          return after_block_end(q + 2, sign);
        }
      }
      char c = src_[p];
      if (is_ident_start(c)) {
        size_t s = p;
        while (p < src_.size() && is_ident(src_[p])) ++p;
        out_.push_back(Token{Token::Kind::Name, std::string(src_.substr(s, p - s)), 0, 0, s});
      } else if (is_digit(c)) {
        p = lex_number(p);
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else {
        p = lex_operator(p, balance);
      }
    }
  }

  size_t lex_number(size_t p) {
    size_t s = p;
    std::string digits;
    auto take_digits = [&] {
      while (p < src_.size() && (is_digit(src_[p]) || (src_[p] == '_' && p + 1 < src_.size() &&
                                                       is_digit(src_[p + 1])))) {
        if (src_[p] != '_') digits += src_[p];
        ++p;
      }
    };
    take_digits();
    bool is_float = false;
    if (p + 1 < src_.size() && src_[p] == '.' && is_digit(src_[p + 1])) {
      is_float = true;
      digits += '.';
      ++p;
      take_digits();
    }
    if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && is_digit(src_[q])) {
        is_float = true;
        digits += 'e';
        digits.append(src_.substr(p + 1, q - p - 1));
        p = q;
        take_digits();
      }
    }
    Token t{is_float ? Token::Kind::Float : Token::Kind::Int, digits, 0, 0, s};
    if (is_float) {
      t.float_value = std::strtod(digits.c_str(), nullptr);
    } else {
      errno = 0;
      char* end = nullptr;
      long long v = std::strtoll(digits.c_str(), &end, 10);
      if (errno == ERANGE) syntax_error(src_, s, "integer literal too large: " + digits);
      t.int_value = v;
    }
    out_.push_back(std::move(t));
    return p;
  }

  // Python-style escapes, as jinja2 decodes string literals with "unicode-escape".
  size_t lex_string(size_t p) {
    size_t s = p;
    char quote = src_[p++];
    std::string value;
    while (true) {
      if (p >= src_.size()) syntax_error(src_, s, "unterminated string literal");
      char c = src_[p++];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        continue;
      }
      if (p >= src_.size()) syntax_error(src_, s, "unterminated string literal");
      char e = src_[p++];
      switch (e) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case 'a':
          value += '\a';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'v':
          value += '\v';
          break;
        case '\n':
          break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (int i = 0; i < n; ++i) {
            int h = p < src_.size() ? hex_value(src_[p]) : -1;
            if (h < 0) syntax_error(src_, p, std::string("truncated \\") + e + " escape in string");
            cp = cp * 16 + uint32_t(h);
            ++p;
          }
          if (cp > 0x10ffff) syntax_error(src_, p, "escape out of Unicode range in string");
          append_utf8(value, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = uint32_t(e - '0');
            for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i) {
              cp = cp * 8 + uint32_t(src_[p++] - '0');
            }
            append_utf8(value, cp);
          } else {
            value += '\\';  // unknown escapes are kept verbatim, as in Python
            value += e;
          }
      }
    }
    out_.push_back(Token{Token::Kind::String, std::move(value), 0, 0, s});
    return p;
  }

  size_t lex_operator(size_t p, std::vector<size_t>& balance) {
    static const char* kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : kTwo) {
      if (src_.compare(p, 2, op) == 0) {
        out_.push_back(Token{Token::Kind::Op, op, 0, 0, p});
        return p + 2;
      }
    }
    char c = src_[p];
    if (!std::strchr("+-*/%~<>=()[]{},.:|", c) || c == 0) {
      syntax_error(src_, p, std::string("unexpected character '") + c + "' in tag");
    }
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(p);
    } else if (c == ')' || c == ']' || c == '}') {
      char open = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (balance.empty()) syntax_error(src_, p, std::string("unexpected '") + c + "'");
      if (src_[balance.back()] != open) {
        syntax_error(src_, balance.back(),
                     std::string("unclosed '") + src_[balance.back()] + "' in tag");
      }
      balance.pop_back();
    }
    out_.push_back(Token{Token::Kind::Op, std::string(1, c), 0, 0, p});
    return p + 1;
  }

  std::string_view src_;
  LexOptions opt_;
  std::vector<Token> out_;
};

}  // namespace

std::string normalize_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::vector<Token> lex(std::string_view source, const LexOptions& options) {
  return Lexer(source, options).run();
}

std::string describe_pos(std::string_view source, size_t pos) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < pos && i < source.size(); ++i) {
    if (source[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

void syntax_error(std::string_view source, size_t pos, const std::string& what) {
  fail("chat template syntax error at " + describe_pos(source, pos) + ": " + what);
}

}  // namespace fak::jinja
