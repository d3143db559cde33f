// The parsed form of a Jinja template: expression and statement trees. Deliberately two plain
// tagged structs rather than a class hierarchy: the evaluator switches on the kind, and every node
// keeps its source offset so render-time errors can name a line and column.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace fak::jinja {

// The variable a `{% filter %}` or filtered `{% set %}` block's rendered body is bound to.
inline constexpr const char* kBodyName = "__block_body__";

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,  // value
    Name,     // name
    List,     // args (tuples are lists too)
    Dict,     // kwargs-style pairs in `pairs` (keys are expressions)
    Unary,    // name = "-", "+", "not"; args[0]
    Binary,   // name = operator ("+", "-", "~", "and", "or", ...); args[0], args[1]
    Compare,  // args[0] then (operator, operand) in kwargs: `a < b <= c` chains like Python
    Cond,     // args = {then, cond, else (may be null)}
    Attr,     // args[0].name
    Index,    // args[0][args[1]]
    Slice,    // args[0][args[1]:args[2]:args[3]] (null parts allowed)
    Call,     // args[0](args[1..], kwargs)
    Filter,   // name; args[0] is the input, args[1..] and kwargs the filter's arguments
    Test,     // name; args[0] is the subject, args[1..] arguments; negated for `is not`
  };
  Expr(Kind k, size_t p) : kind(k), pos(p) {}
  Kind kind;
  size_t pos = 0;
  int depth = 1;  // height of this subtree; the parser caps it so evaluation cannot blow the stack
  std::string name;
  Value value;
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::pair<ExprPtr, ExprPtr>> pairs;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Param {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  enum class Kind {
    Text,         // text
    Output,       // {{ expr }}
    If,           // expr; body; else_body (an elif is a nested If there)
    For,          // targets in expr [if filter]; body; else_body
    Set,          // targets (or name.attr when attr non-empty) = expr
    SetBlock,     // {% set name %}body{% endset %}, optional filter chain in expr
    Macro,        // name(params) body
    CallBlock,    // {% call(params) expr %}body{% endcall %}
    FilterBlock,  // {% filter f %}body{% endfilter %}: expr is a Filter chain over Name "__body"
    Break,
    Continue,
  };
  Stmt(Kind k, size_t p) : kind(k), pos(p) {}
  Kind kind;
  size_t pos = 0;
  std::string text;  // Text; Set: namespace attribute
  std::string name;  // Macro name
  std::vector<std::string> targets;
  ExprPtr expr;
  ExprPtr filter;  // For: the `if` clause
  std::vector<Param> params;
  Body body;
  Body else_body;
};

struct Program {
  std::string source;  // normalised source, for error positions
  Body body;
};

}  // namespace fak::jinja
