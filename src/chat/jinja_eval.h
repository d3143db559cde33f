// Evaluates a parsed template: scopes (a fresh one per loop iteration and macro call, as jinja2
// does), operators with Python semantics, loops, macros and output capture.
//
// A template comes with a model download, so a render is bounded as a whole, not per dimension:
// one depth count over expressions, statements and macro calls together (plus a guard on the
// thread's own stack), every string and list the render creates charged by its bytes to one
// budget, each value's size computed without overflow before it is built, a step count, a
// wall-clock deadline and a cancel flag (the client left). Each limit is a fak::Error naming it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "chat/jinja_ast.h"

namespace fak::jinja {

struct Limits {
  size_t max_output = size_t(16) << 20;       // bytes of the rendered text
  size_t max_value = size_t(16) << 20;        // bytes of any one string or list (value_bytes)
  uint64_t max_work = uint64_t(256) << 20;    // bytes of all strings and lists the render creates
  uint64_t max_steps = 20'000'000;            // statements executed + loop iterations + calls
  int max_call_depth = 64;                    // nested macro calls
  int max_depth = 1000;                       // nested expressions, statements and calls together
  std::chrono::milliseconds max_time{5000};   // wall clock of one render
  const std::atomic<bool>* cancel = nullptr;  // set: stop (the client left)
  std::optional<std::tm> now;                 // strftime_now's local time; unset: the clock's
};

// Bytes a value holds of its own: a string's bytes; a list's items (each a Value, with a string
// item's bytes, since strings are held by value and lists and dicts shared); a dict's entries.
uint64_t value_bytes(const Value& v);

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
  // A string about to hold n bytes, or a list of `items` values holding `bytes` (value_bytes):
  // refused past Limits::max_value. Callers compute sizes with overflow checks (saturating).
  void check_size(uint64_t bytes, size_t pos) const;
  void check_items(uint64_t items, size_t pos) const;
  // Counts `bytes` of new strings and lists against Limits::max_work; charge(v) also checks v.
  void charge(uint64_t bytes, size_t pos);
  void charge(const Value& v, size_t pos);
  void step(size_t pos);  // also where the deadline and the cancel flag are looked at
  void track_namespace(const Value& ns);  // see ~Interpreter
  size_t max_size() const { return limits_.max_value; }
  const std::optional<std::tm>& pinned_now() const { return limits_.now; }
  // Iterating a value the way a for loop does (lists, dict keys, string characters; Undefined is
  // empty), its size checked and its copy charged.
  List iterate(const Value& v, size_t pos);

 private:
  struct Scope {
    Dict vars;
    Scope* parent = nullptr;
  };
  enum class Flow { Normal, Break, Continue };

  // One nested frame: counted against max_depth, and the thread's stack checked directly.
  class Nesting {
   public:
    Nesting(Interpreter& in, size_t pos);
    ~Nesting() { --in_.depth_; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;

   private:
    Interpreter& in_;
  };

  Value lookup(const std::string& name) const;
  Value eval_node(const Expr& e);
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
  const std::string* root_out_ = nullptr;  // the rendered text (out_ may be a capture)
  uint64_t steps_ = 0, work_ = 0;
  int call_depth_ = 0, depth_ = 0;
  const char* stack_floor_ = nullptr;  // below this address the thread's stack is too short
  std::chrono::steady_clock::time_point deadline_;
  std::vector<Value> namespaces_;
};

// The operators as Python applies them, shared with filters (sum) and tests.
Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b, size_t pos);
bool contains(const Value& container, const Value& item);
// Python slicing of a list or string (by code point).
Value slice(const Value& v, const Value& start, const Value& stop, const Value& step);

}  // namespace fak::jinja
