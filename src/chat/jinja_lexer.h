// Splits Jinja template source into text and tag tokens, applying whitespace control the way
// jinja2's lexer does: `{%-`/`-%}` strip, `+` opts out, and the trim_blocks / lstrip_blocks
// settings transformers turns on for chat templates. `{% raw %}` blocks come out as plain text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fak::jinja {

struct Token {
  enum class Kind {
    Text,
    VarBegin,
    VarEnd,
    BlockBegin,
    BlockEnd,
    Name,
    String,
    Int,
    Float,
    Op,
    Eof
  };
  Kind kind;
  std::string text;  // Text bytes, Name, unescaped String, Op spelling
  int64_t int_value = 0;
  double float_value = 0;
  size_t pos = 0;  // byte offset into the (newline-normalised) source
};

struct LexOptions {
  bool trim_blocks = true;    // drop the first newline after a block or comment tag
  bool lstrip_blocks = true;  // drop spaces/tabs before a block or comment tag on its own line
};

// jinja2 normalises \r\n and \r to \n and drops one trailing newline (keep_trailing_newline=False)
// before lexing; positions in errors refer to this normalised text.
std::string normalize_source(std::string_view source);

std::vector<Token> lex(std::string_view source, const LexOptions& options = {});

// "line L, column C" (1-based) of a byte offset.
std::string describe_pos(std::string_view source, size_t pos);
[[noreturn]] void syntax_error(std::string_view source, size_t pos, const std::string& what);

}  // namespace fak::jinja
