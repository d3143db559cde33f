// Recursive-descent Jinja parser. Precedence follows jinja2/parser.py: conditional < or < and <
// not < comparison < + - < ~ < * / // % < ** < unary < postfix (. [] ()) < filters and tests.
// Over 600 lines: one grammar, one function per rule, as jinja2's parser is.
#include "chat/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

#include "chat/jinja_builtins.h"
#include "chat/jinja_lexer.h"
#include "core/error.h"

namespace fak::jinja {

namespace {

// Deep nesting only comes from hostile input; stop long before the C++ stack does.
constexpr int kMaxDepth = 100;

using TK = Token::Kind;

class Parser {
 public:
  Parser(std::vector<Token> tokens, std::string_view src) : toks_(std::move(tokens)), src_(src) {}

  Body parse_all() {
    Body body = parse_body({}, "", 0);
    return body;
  }

 private:
  const Token& cur() const { return toks_[i_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(i_ + n, toks_.size() - 1)]; }
  void next() {
    if (i_ + 1 < toks_.size()) ++i_;
  }

  [[noreturn]] void error(const std::string& what) const { syntax_error(src_, cur().pos, what); }
  [[noreturn]] void error_at(size_t pos, const std::string& what) const {
    syntax_error(src_, pos, what);
  }

  std::string describe(const Token& t) const {
    switch (t.kind) {
      case TK::Eof:
        return "end of template";
      case TK::BlockEnd:
        return "end of tag '%}'";
      case TK::VarEnd:
        return "end of expression '}}'";
      case TK::String:
        return "string literal";
      case TK::Text:
        return "text";
      default:
        return "'" + t.text + "'";
    }
  }

  bool is_op(const char* op) const { return cur().kind == TK::Op && cur().text == op; }
  bool is_name(const char* name) const { return cur().kind == TK::Name && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) error(std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name(const char* what) {
    if (cur().kind != TK::Name) error(std::string("expected ") + what + ", got " + describe(cur()));
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end(const char* tag) {
    if (cur().kind != TK::BlockEnd) {
      error(std::string("expected end of '") + tag + "' tag '%}', got " + describe(cur()));
    }
    next();
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p(p) {
      if (++p.depth_ > kMaxDepth) p.error("template nested too deeply");
    }
    ~DepthGuard() { --p.depth_; }
    Parser& p;
  };

  // Parses statements until a block tag whose keyword is in `ends` (left unconsumed: the cursor
  // stays on that keyword). With no ends, parses to end of input.
  Body parse_body(std::initializer_list<const char*> ends, const std::string& opener,
                  size_t opener_pos) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.kind == TK::Eof) {
        if (ends.size() == 0) return body;
        error_at(opener_pos, "unclosed '" + opener + "' block: expected '{% " +
                                 std::string(*(ends.end() - 1)) + " %}' before end of template");
      }
      if (t.kind == TK::Text) {
        auto s = std::make_unique<Stmt>(Stmt::Kind::Text, t.pos);
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.kind == TK::VarBegin) {
        auto s = std::make_unique<Stmt>(Stmt::Kind::Output, t.pos);
        next();
        s->expr = parse_tuple(true);
        if (cur().kind != TK::VarEnd) error("expected '}}', got " + describe(cur()));
        next();
        body.push_back(std::move(s));
      } else if (t.kind == TK::BlockBegin) {
        const Token& kw = peek();
        if (kw.kind != TK::Name) error_at(kw.pos, "expected a tag name, got " + describe(kw));
        for (const char* e : ends) {
          if (kw.text == e) {
            next();  // onto the keyword
            return body;
          }
        }
        if (is_end_keyword(kw.text)) {
          std::string msg = "unexpected '" + kw.text + "'";
          if (ends.size() == 0) {
            msg += ": no open block to close";
          } else {
            msg += ", expected ";
            bool first = true;
            for (const char* e : ends) {
              msg += (first ? "'" : " or '") + std::string(e) + "'";
              first = false;
            }
            msg += " (the '" + opener + "' block opened at " + describe_pos(src_, opener_pos) + ")";
          }
          error_at(kw.pos, msg);
        }
        next();
        body.push_back(parse_statement(t.pos));
      } else {
        error("unexpected " + describe(t));
      }
    }
  }

  static bool is_end_keyword(const std::string& k) {
    return k.rfind("end", 0) == 0 || k == "elif" || k == "else";
  }

  // Cursor on the tag keyword.
  StmtPtr parse_statement(size_t pos) {
    std::string kw = cur().text;
    size_t kw_pos = cur().pos;
    next();
    if (kw == "if") return parse_if(pos);
    if (kw == "for") return parse_for(pos);
    if (kw == "set") return parse_set(pos);
    if (kw == "macro") return parse_macro(pos);
    if (kw == "call") return parse_call(pos);
    if (kw == "filter") return parse_filter_block(pos);
    if (kw == "break" || kw == "continue") {
      if (loop_depth_ == 0) error_at(kw_pos, "'" + kw + "' outside of a for loop");
      expect_block_end(kw.c_str());
      return std::make_unique<Stmt>(kw == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, pos);
    }
    if (kw == "generation") {
      // transformers' AssistantTracker tag: marks assistant text for masks; renders its body.
      expect_block_end("generation");
      auto s = std::make_unique<Stmt>(Stmt::Kind::If, pos);
      s->expr = literal(Value(true), pos);
      s->body = parse_body({"endgeneration"}, "generation", pos);
      next();
      expect_block_end("endgeneration");
      return s;
    }
    static const char* kUnsupported[] = {"include", "extends", "import", "from",
                                         "block",   "with",    "do",     "autoescape"};
    for (const char* u : kUnsupported) {
      if (kw == u) error_at(kw_pos, "unsupported tag '" + kw + "' in a chat template");
    }
    error_at(kw_pos, "unknown tag '" + kw + "'");
  }

  StmtPtr parse_if(size_t pos) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::If, pos);
    s->expr = parse_tuple(true);
    expect_block_end("if");
    s->body = parse_body({"elif", "else", "endif"}, "if", pos);
    std::string kw = cur().text;
    size_t kw_pos = cur().pos;
    next();
    if (kw == "elif") {
      s->else_body.push_back(parse_if(kw_pos));  // consumes through endif
      return s;
    }
    if (kw == "else") {
      expect_block_end("else");
      s->else_body = parse_body({"endif"}, "if", pos);
      next();
    }
    expect_block_end("endif");
    return s;
  }

  StmtPtr parse_for(size_t pos) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::For, pos);
    bool paren = skip_op("(");
    do {
      s->targets.push_back(expect_name("a loop variable name"));
    } while (skip_op(","));
    if (paren) expect_op(")");
    if (!skip_name("in")) error("expected 'in' in for loop, got " + describe(cur()));
    s->expr = parse_tuple(false);
    if (skip_name("if")) s->filter = parse_expression(true);
    if (is_name("recursive")) error("recursive for loops are not supported");
    expect_block_end("for");
    ++loop_depth_;
    s->body = parse_body({"else", "endfor"}, "for", pos);
    --loop_depth_;
    if (cur().text == "else") {
      next();
      expect_block_end("else");
      s->else_body = parse_body({"endfor"}, "for", pos);
    }
    next();
    expect_block_end("endfor");
    return s;
  }

  StmtPtr parse_set(size_t pos) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::Set, pos);
    s->targets.push_back(expect_name("a variable name"));
    if (skip_op(".")) {
      s->text = expect_name("an attribute name");
    } else {
      while (skip_op(",")) s->targets.push_back(expect_name("a variable name"));
    }
    if (skip_op("=")) {
      s->expr = parse_tuple(true);
      expect_block_end("set");
      return s;
    }
    if (s->targets.size() != 1 || !s->text.empty()) error("expected '=' in set");
    s->kind = Stmt::Kind::SetBlock;
    if (is_op("|")) {
      auto placeholder = std::make_unique<Expr>(Expr::Kind::Name, cur().pos);
      placeholder->name = kBodyName;
      s->expr = parse_filter_chain(std::move(placeholder), false);
    }
    expect_block_end("set");
    s->body = parse_body({"endset"}, "set", pos);
    next();
    expect_block_end("endset");
    return s;
  }

  void parse_params(std::vector<Param>& params) {
    expect_op("(");
    while (!is_op(")")) {
      Param p;
      p.name = expect_name("a parameter name");
      if (skip_op("=")) p.default_value = parse_expression(true);
      params.push_back(std::move(p));
      if (!skip_op(",")) break;
    }
    expect_op(")");
  }

  StmtPtr parse_macro(size_t pos) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::Macro, pos);
    s->name = expect_name("a macro name");
    parse_params(s->params);
    expect_block_end("macro");
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endmacro"}, "macro", pos);
    loop_depth_ = saved;
    next();
    if (cur().kind == TK::Name) next();  // `{% endmacro name %}`
    expect_block_end("endmacro");
    return s;
  }

  StmtPtr parse_call(size_t pos) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::CallBlock, pos);
    if (is_op("(")) parse_params(s->params);
    s->expr = parse_expression(true);
    if (s->expr->kind != Expr::Kind::Call)
      error_at(s->expr->pos, "expected a macro call in 'call'");
    expect_block_end("call");
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endcall"}, "call", pos);
    loop_depth_ = saved;
    next();
    expect_block_end("endcall");
    return s;
  }

  StmtPtr parse_filter_block(size_t pos) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::FilterBlock, pos);
    auto placeholder = std::make_unique<Expr>(Expr::Kind::Name, cur().pos);
    placeholder->name = kBodyName;
    s->expr = parse_filter_chain(std::move(placeholder), true);
    expect_block_end("filter");
    s->body = parse_body({"endfilter"}, "filter", pos);
    next();
    expect_block_end("endfilter");
    return s;
  }

  // ---- expressions ----

  // Records the subtree height; operator chains (a+a+a...) grow trees without recursing in the
  // parser, so the height, not the parser's own depth, is what bounds evaluation recursion.
  ExprPtr seal(ExprPtr e) const {
    int d = 0;
    for (const auto& a : e->args) d = std::max(d, a ? a->depth : 0);
    for (const auto& [k, v] : e->kwargs) d = std::max(d, v->depth);
    for (const auto& [k, v] : e->pairs) d = std::max({d, k->depth, v->depth});
    e->depth = d + 1;
    if (e->depth > 4 * kMaxDepth) error_at(e->pos, "expression nested too deeply");
    return e;
  }

  static ExprPtr literal(Value v, size_t pos) {
    auto e = std::make_unique<Expr>(Expr::Kind::Literal, pos);
    e->value = std::move(v);
    return e;
  }
  ExprPtr node(Expr::Kind kind, size_t pos, std::string name, ExprPtr a, ExprPtr b = nullptr) {
    auto e = std::make_unique<Expr>(kind, pos);
    e->name = std::move(name);
    e->args.push_back(std::move(a));
    if (b) e->args.push_back(std::move(b));
    return seal(std::move(e));
  }

  ExprPtr parse_tuple(bool with_cond) {
    size_t pos = cur().pos;
    ExprPtr first = parse_expression(with_cond);
    if (!is_op(",")) return first;
    auto list = std::make_unique<Expr>(Expr::Kind::List, pos);
    list->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().kind == TK::BlockEnd || cur().kind == TK::VarEnd || is_op(")")) break;
      list->args.push_back(parse_expression(with_cond));
    }
    return seal(std::move(list));
  }

  ExprPtr parse_expression(bool with_cond) {
    DepthGuard guard(*this);
    ExprPtr e = parse_or();
    if (!with_cond) return e;
    while (is_name("if")) {
      size_t pos = cur().pos;
      next();
      ExprPtr cond = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_expression(true) : nullptr;
      auto c = std::make_unique<Expr>(Expr::Kind::Cond, pos);
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(otherwise));
      e = seal(std::move(c));
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      size_t pos = cur().pos;
      next();
      left = node(Expr::Kind::Binary, pos, "or", std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      size_t pos = cur().pos;
      next();
      left = node(Expr::Kind::Binary, pos, "and", std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      size_t pos = cur().pos;
      next();
      return node(Expr::Kind::Unary, pos, "not", parse_not());
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    size_t pos = cur().pos;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().kind == TK::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                   cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().kind == TK::Name && peek().text == "in") {
        op = "not in";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = std::make_unique<Expr>(Expr::Kind::Compare, pos);
        cmp->args.push_back(std::move(first));
      }
      cmp->kwargs.emplace_back(op, parse_math1());
    }
    return cmp ? seal(std::move(cmp)) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      size_t pos = cur().pos;
      next();
      left = node(Expr::Kind::Binary, pos, op, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      size_t pos = cur().pos;
      next();
      left = node(Expr::Kind::Binary, pos, "~", std::move(left), parse_math2());
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      size_t pos = cur().pos;
      next();
      left = node(Expr::Kind::Binary, pos, op, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      size_t pos = cur().pos;
      next();
      left = node(Expr::Kind::Binary, pos, "**", std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    size_t pos = cur().pos;
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      std::string op = cur().text;
      next();
      e = node(Expr::Kind::Unary, pos, op, parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_chain(std::move(e), false);
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    size_t pos = t.pos;
    switch (t.kind) {
      case TK::Name: {
        std::string n = t.text;
        next();
        if (n == "true" || n == "True") return literal(Value(true), pos);
        if (n == "false" || n == "False") return literal(Value(false), pos);
        if (n == "none" || n == "None") return literal(Value(nullptr), pos);
        auto e = std::make_unique<Expr>(Expr::Kind::Name, pos);
        e->name = n;
        return e;
      }
      case TK::String: {
        std::string s;
        while (cur().kind == TK::String) {  // adjacent literals concatenate, as in Python
          s += cur().text;
          next();
        }
        return literal(Value(std::move(s)), pos);
      }
      case TK::Int: {
        int64_t v = t.int_value;
        next();
        return literal(Value(v), pos);
      }
      case TK::Float: {
        double v = t.float_value;
        next();
        return literal(Value(v), pos);
      }
      case TK::Op:
        if (t.text == "(") {
          next();
          if (skip_op(")")) return std::make_unique<Expr>(Expr::Kind::List, pos);
          ExprPtr e = parse_tuple(true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          next();
          auto list = std::make_unique<Expr>(Expr::Kind::List, pos);
          while (!is_op("]")) {
            list->args.push_back(parse_expression(true));
            if (!skip_op(",")) break;
          }
          expect_op("]");
          return seal(std::move(list));
        }
        if (t.text == "{") {
          next();
          auto dict = std::make_unique<Expr>(Expr::Kind::Dict, pos);
          while (!is_op("}")) {
            ExprPtr k = parse_expression(true);
            expect_op(":");
            dict->pairs.emplace_back(std::move(k), parse_expression(true));
            if (!skip_op(",")) break;
          }
          expect_op("}");
          return seal(std::move(dict));
        }
        break;
      default:
        break;
    }
    error("unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      size_t pos = cur().pos;
      if (skip_op(".")) {
        if (cur().kind == TK::Int) {
          e = node(Expr::Kind::Index, pos, "", std::move(e), literal(Value(cur().int_value), pos));
          next();
        } else {
          e = node(Expr::Kind::Attr, pos, expect_name("an attribute name"), std::move(e));
        }
      } else if (skip_op("[")) {
        e = parse_subscript(std::move(e), pos);
      } else if (is_op("(")) {
        e = parse_call_args(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target, size_t pos) {
    ExprPtr parts[3];
    int n = 0;
    bool slice = false;
    while (true) {
      if (!is_op(":") && !is_op("]")) parts[n] = parse_expression(true);
      if (is_op(":")) {
        if (n == 2) error("too many ':' in slice");
        slice = true;
        ++n;
        next();
        continue;
      }
      break;
    }
    expect_op("]");
    if (!slice) {
      if (!parts[0]) error_at(pos, "empty subscript");
      return node(Expr::Kind::Index, pos, "", std::move(target), std::move(parts[0]));
    }
    auto e = std::make_unique<Expr>(Expr::Kind::Slice, pos);
    e->args.push_back(std::move(target));
    for (auto& p : parts) e->args.push_back(std::move(p));
    return seal(std::move(e));
  }

  // Cursor on "(": parses call arguments into e (a Call node wrapping callee).
  void parse_args_into(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (cur().kind == TK::Name && peek().kind == TK::Op && peek().text == "=") {
        std::string k = cur().text;
        next();
        next();
        e.kwargs.emplace_back(k, parse_expression(true));
      } else {
        if (!e.kwargs.empty()) error("positional argument after keyword argument");
        e.args.push_back(parse_expression(true));
      }
      if (!skip_op(",")) break;
    }
    expect_op(")");
  }

  ExprPtr parse_call_args(ExprPtr callee) {
    auto e = std::make_unique<Expr>(Expr::Kind::Call, cur().pos);
    e->args.push_back(std::move(callee));
    parse_args_into(*e);
    return seal(std::move(e));
  }

  ExprPtr parse_filter_chain(ExprPtr e, bool first_without_pipe) {
    bool need_pipe = !first_without_pipe;
    while (true) {
      if (!need_pipe || is_op("|")) {
        if (need_pipe) next();
        need_pipe = true;
        size_t pos = cur().pos;
        std::string name = expect_name("a filter name");
        if (!has_filter(name)) error_at(pos, "unknown filter '" + name + "'");
        auto f = std::make_unique<Expr>(Expr::Kind::Filter, pos);
        f->name = name;
        f->args.push_back(std::move(e));
        if (is_op("(")) parse_args_into(*f);
        e = seal(std::move(f));
      } else if (is_name("is")) {
        next();
        auto t = std::make_unique<Expr>(Expr::Kind::Test, cur().pos);
        t->negated = skip_name("not");
        size_t pos = cur().pos;
        t->name = expect_name("a test name");
        if (!has_test(t->name)) error_at(pos, "unknown test '" + t->name + "'");
        t->args.push_back(std::move(e));
        if (is_op("(")) {
          parse_args_into(*t);
        } else if ((cur().kind == TK::Name || cur().kind == TK::String || cur().kind == TK::Int ||
                    cur().kind == TK::Float || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if") &&
                   !is_name("is")) {
          // `x is divisibleby 3`, `x is sameas false`: one bare argument
          t->args.push_back(parse_postfix(parse_primary()));
        }
        e = seal(std::move(t));
      } else {
        return e;
      }
    }
  }

  std::vector<Token> toks_;
  std::string_view src_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Program parse_template(std::string_view source) {
  Program program;
  program.source = normalize_source(source);
  Parser parser(lex(program.source), program.source);
  program.body = parser.parse_all();
  return program;
}

}  // namespace fak::jinja
