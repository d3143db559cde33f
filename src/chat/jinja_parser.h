// Jinja parser: tokens to the statement/expression trees of jinja_ast.h, with jinja2's operator
// precedence. Every syntax problem (unclosed block, stray end tag, unknown filter or test) throws
// fak::Error naming the line and column.
#pragma once

#include <string_view>

#include "chat/jinja_ast.h"

namespace fak::jinja {

// Normalises newlines, lexes with trim_blocks/lstrip_blocks on (as transformers does) and parses.
Program parse_template(std::string_view source);

}  // namespace fak::jinja
