// Evaluates a parsed template: scopes (a fresh one per loop iteration and macro call, as jinja2
// does), operators with Python semantics, loops, macros and output capture. Resource limits turn
// runaway templates (huge strings, endless recursion, enormous loops) into fak::Error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chat/jinja_ast.h"

namespace fak::jinja {

struct Limits {
  size_t max_output = size_t(64) << 20;  // bytes in the output and in any one string or list
  uint64_t max_steps = 20'000'000;       // statements executed + loop iterations + calls
  int max_call_depth = 64;               // nested macro calls
};

class Interpreter {
 public:
  Interpreter(const Program& program, const Limits& limits) : program_(program), limits_(limits) {}
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Renders with `context` as the outermost variables (globals are added beneath them).
  std::string render(const Dict& context);

  Value call(const Value& callee, CallArgs& args);
  // Throws fak::Error naming the line and column of `pos`.
  [[noreturn]] void error(size_t pos, const std::string& what) const;
  void check_size(size_t n, size_t pos) const;  // a string/list about to hold n bytes/items
  void step(size_t pos);
  void track_namespace(const Value& ns);  // see ~Interpreter
  size_t max_size() const { return limits_.max_output; }

 private:
  struct Scope {
    Dict vars;
    Scope* parent = nullptr;
  };
  enum class Flow { Normal, Break, Continue };

  Value lookup(const std::string& name) const;
  Flow exec_body(const Body& body);
  Flow exec(const Stmt& s);
  void exec_for(const Stmt& s);
  void exec_set(const Stmt& s);
  std::string capture(const Body& body, Scope* scope);
  Value call_macro(const Stmt& macro, CallArgs& args, const Value& caller);
  Value eval(const Expr& e);
  Value eval_binary(const Expr& e);
  Value eval_compare(const Expr& e);
  Value eval_slice(const Expr& e);
  void emit(const std::string& s, size_t pos);

  const Program& program_;
  Limits limits_;
  Scope* scope_ = nullptr;
  Scope* root_ = nullptr;
  std::string* out_ = nullptr;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  std::vector<Value> namespaces_;
};

// The operators as Python applies them, shared with filters (sum) and tests.
Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b, size_t pos);
bool contains(const Value& container, const Value& item);
// Iterating a value the way a for loop does: lists, dict keys, string characters; Undefined is
// empty; anything else is an error.
List iterate(const Value& v);
// Python slicing of a list or string (by code point).
Value slice(const Value& v, const Value& start, const Value& stop, const Value& step);

}  // namespace fak::jinja
