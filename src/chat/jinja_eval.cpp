// Statement execution and Python operator semantics. Undefined follows jinja2's default Undefined:
// falsey, prints as "", iterates as empty, but attribute access, calls and arithmetic on it fail.
// note: a render that throws leaves the Interpreter's scope/output pointers dangling; it is never
// reused after an error (render() resets everything), so no unwinding bookkeeping is needed.
// Over 600 lines: every statement and operator of the language, one evaluator.
#include "chat/jinja_eval.h"

#include <pthread.h>

#include <algorithm>
#include <cmath>

#include "chat/jinja_builtins.h"
#include "chat/jinja_lexer.h"
#include "core/error.h"

namespace fak::jinja {

namespace {

[[noreturn]] void type_error(Interpreter& in, size_t pos, const std::string& op, const Value& a,
                             const Value& b) {
  if (a.is_undefined()) in.error(pos, a.as_string());
  if (b.is_undefined()) in.error(pos, b.as_string());
  in.error(pos, "unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
                    b.type_name() + "'");
}

bool is_num(const Value& v) {
  return v.is_number();
}

Value int_result(Interpreter& in, size_t pos, bool overflow, int64_t r) {
  if (overflow) in.error(pos, "integer overflow");
  return r;
}

// Python's `str % args` for the conversions templates use (%s %d %i %r %f %%).
std::string percent_format(Interpreter& in, size_t pos, const std::string& fmt, const Value& args) {
  List list = args.is_list() ? args.as_list() : List{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) in.error(pos, "incomplete format");
    char c = fmt[i];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (next >= list.size()) in.error(pos, "not enough arguments for format string");
    const Value& v = list[next++];
    if (c == 's') {
      out += to_str(v);
    } else if (c == 'r') {
      out += repr(v);
    } else if ((c == 'd' || c == 'i') && is_num(v)) {
      out += std::to_string(v.is_float() ? int64_t(v.as_double()) : v.as_int());
    } else if (c == 'f' && is_num(v)) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%f", v.as_double());
      out += buf;
    } else {
      in.error(pos, std::string("unsupported format '%") + c + "' for " + v.type_name());
    }
    in.check_size(out.size(), pos);
  }
  if (next < list.size()) in.error(pos, "not all arguments converted during string formatting");
  in.charge(out.size(), pos);
  return out;
}

uint64_t saturating_mul(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

// note: a zero-size repeat costs nothing however large n is (never loops n times), and the size
// of a large one is computed saturating, so 'abcd' * 2**62 is refused rather than wrapped.
Value repeat(Interpreter& in, size_t pos, const Value& seq, int64_t n) {
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (n <= 0 || s.empty()) return std::string();
    const uint64_t bytes = saturating_mul(s.size(), uint64_t(n));
    in.check_size(bytes, pos);
    in.charge(bytes, pos);
    std::string out;
    out.reserve(size_t(bytes));
    for (int64_t i = 0; i < n; ++i) out += s;
    return out;
  }
  const List& items = seq.as_list();
  if (n <= 0 || items.empty()) return List{};
  const uint64_t bytes = saturating_mul(value_bytes(seq), uint64_t(n));
  in.check_size(bytes, pos);
  in.charge(bytes, pos);
  List out;
  out.reserve(items.size() * size_t(n));
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return out;
}

}  // namespace

Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b,
                size_t pos) {
  bool nums = is_num(a) && is_num(b);
  bool ints = nums && !a.is_float() && !b.is_float();
  if (op == "+") {
    if (ints) {
      int64_t r = 0;
      bool overflow = __builtin_add_overflow(a.as_int(), b.as_int(), &r);
      return int_result(in, pos, overflow, r);
    }
    if (nums) return a.as_double() + b.as_double();
    if (a.is_string() && b.is_string()) {
      if (a.is_markup() != b.is_markup()) {
        // Markup + str / str + Markup: the plain operand is escaped, the result is Markup.
        const std::string joined = a.is_markup() ? a.as_string() + html_escape(b.as_string())
                                                 : html_escape(a.as_string()) + b.as_string();
        in.check_size(joined.size(), pos);
        in.charge(joined.size(), pos);
        return Value::markup(joined);
      }
      const uint64_t bytes = uint64_t(a.as_string().size()) + b.as_string().size();
      in.check_size(bytes, pos);
      in.charge(bytes, pos);
      if (a.is_markup()) return Value::markup(a.as_string() + b.as_string());
      return a.as_string() + b.as_string();
    }
    if (a.is_list() && b.is_list()) {
      const uint64_t bytes = value_bytes(a) + value_bytes(b);
      in.check_size(bytes, pos);
      in.charge(bytes, pos);
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return out;
    }
  } else if (op == "-") {
    if (ints) {
      int64_t r = 0;
      bool overflow = __builtin_sub_overflow(a.as_int(), b.as_int(), &r);
      return int_result(in, pos, overflow, r);
    }
    if (nums) return a.as_double() - b.as_double();
  } else if (op == "*") {
    if (ints) {
      int64_t r = 0;
      bool overflow = __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
      return int_result(in, pos, overflow, r);
    }
    if (nums) return a.as_double() * b.as_double();
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) {
      return repeat(in, pos, a, b.as_int());
    }
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) {
      return repeat(in, pos, b, a.as_int());
    }
  } else if (op == "/") {
    if (nums) {
      if (b.as_double() == 0) in.error(pos, "division by zero");
      return a.as_double() / b.as_double();
    }
  } else if (op == "//" || op == "%") {
    if (a.is_string() && op == "%") return percent_format(in, pos, a.as_string(), b);
    if (ints) {
      int64_t x = a.as_int(), y = b.as_int();
      if (y == 0) in.error(pos, "integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) in.error(pos, "integer overflow");
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {  // Python floors toward -inf
        q -= 1;
        r += y;
      }
      return op == "//" ? q : r;
    }
    if (nums) {
      double x = a.as_double(), y = b.as_double();
      if (y == 0) in.error(pos, "float division or modulo by zero");
      double r = std::fmod(x, y);
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      return op == "//" ? std::floor(x / y) : r;
    }
  } else if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t r = 1, base = a.as_int();
      for (int64_t e = b.as_int(); e > 0; --e) {
        if (__builtin_mul_overflow(r, base, &r)) in.error(pos, "integer overflow");
        if (r == 0 || r == 1) break;
      }
      return r;
    }
    if (nums) return std::pow(a.as_double(), b.as_double());
  } else if (op == "~") {
    std::string sa = to_str(a), sb = to_str(b);
    in.check_size(uint64_t(sa.size()) + sb.size(), pos);
    in.charge(uint64_t(sa.size()) + sb.size(), pos);
    return sa + sb;
  }
  type_error(in, pos, op, a, b);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::String:
      if (!item.is_string()) {
        fail(std::string("chat template: 'in <string>' requires string as left operand, not ") +
             item.type_name());
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::List:
      for (const Value& v : container.as_list()) {
        if (equal(v, item)) return true;
      }
      return false;
    case Value::Kind::Dict:
      return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    case Value::Kind::Undefined:
      return false;
    default:
      fail(std::string("chat template: argument of type '") + container.type_name() +
           "' is not iterable");
  }
}

List Interpreter::iterate(const Value& v, size_t pos) {
  switch (v.kind()) {
    case Value::Kind::List:
      charge(value_bytes(v), pos);  // the copy
      return v.as_list();
    case Value::Kind::Dict: {
      charge(value_bytes(v), pos);
      List keys;
      for (const auto& [k, e] : v.as_dict().items) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::String: {
      // note: one Value per character: 16 MB of text would be over a gigabyte as a list.
      const std::u32string chars = utf8_decode(v.as_string());
      check_items(chars.size(), pos);
      charge(saturating_mul(chars.size(), sizeof(Value)), pos);
      List out;
      out.reserve(chars.size());
      for (char32_t c : chars) out.emplace_back(utf8_encode({&c, 1}));
      return out;
    }
    case Value::Kind::Undefined:
      return {};
    default:
      error(pos, std::string("'") + v.type_name() + "' object is not iterable");
  }
}

uint64_t value_bytes(const Value& v) {
  auto held = [](const Value& x) -> uint64_t {
    return sizeof(Value) + (x.is_string() ? x.as_string().size() : 0);
  };
  uint64_t n = 0;
  switch (v.kind()) {
    case Value::Kind::String:
      return v.as_string().size();
    case Value::Kind::List:
      for (const Value& x : v.as_list()) n += held(x);
      return n;
    case Value::Kind::Dict:
      for (const auto& [k, x] : v.as_dict().items) n += sizeof(std::string) + k.size() + held(x);
      return n;
    default:
      return 0;
  }
}

Value slice(const Value& v, const Value& start, const Value& stop, const Value& step) {
  auto as_index = [](const Value& x, const char* what) -> std::optional<int64_t> {
    if (x.is_undefined() || x.is_none()) return std::nullopt;
    if (!x.is_int() && !x.is_bool())
      fail(std::string("chat template: slice ") + what + " must be an integer");
    return x.as_int();
  };
  int64_t st = as_index(step, "step").value_or(1);
  if (st == 0) fail("chat template: slice step cannot be zero");
  std::u32string chars;
  int64_t n;
  if (v.is_string()) {
    chars = utf8_decode(v.as_string());
    n = int64_t(chars.size());
  } else if (v.is_list()) {
    n = int64_t(v.as_list().size());
  } else {
    fail(std::string("chat template: '") + v.type_name() + "' object is not subscriptable");
  }
  // PySlice_AdjustIndices
  auto adjust = [&](std::optional<int64_t> x, int64_t dflt) {
    if (!x) return dflt;
    int64_t i = *x;
    if (i < 0) {
      i += n;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= n) {
      i = st < 0 ? n - 1 : n;
    }
    return i;
  };
  int64_t a = adjust(as_index(start, "start"), st < 0 ? n - 1 : 0);
  int64_t b = adjust(as_index(stop, "stop"), st < 0 ? -1 : n);
  std::vector<int64_t> idx;
  for (int64_t i = a; st > 0 ? i < b : i > b; i += st) idx.push_back(i);
  if (v.is_string()) {
    std::u32string out;
    for (int64_t i : idx) out += chars[size_t(i)];
    return utf8_encode(out);
  }
  List out;
  for (int64_t i : idx) out.push_back(v.as_list()[size_t(i)]);
  return out;
}

void Interpreter::error(size_t pos, const std::string& what) const {
  // Helpers below the interpreter throw "chat template: ..." without a position; add one.
  const std::string prefix = "chat template: ";
  std::string msg = what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what;
  fail("chat template error at " + describe_pos(program_.source, pos) + ": " + msg);
}

void Interpreter::check_size(uint64_t bytes, size_t pos) const {
  if (bytes > limits_.max_value) {
    error(pos, "a string or list would hold " +
                   (bytes == UINT64_MAX ? std::string("more than 2^64") : std::to_string(bytes)) +
                   " bytes (limit " + std::to_string(limits_.max_value) + ")");
  }
}

void Interpreter::check_items(uint64_t items, size_t pos) const {
  check_size(saturating_mul(items, sizeof(Value)), pos);
}

void Interpreter::charge(uint64_t bytes, size_t pos) {
  if (bytes > limits_.max_work || (work_ += bytes) > limits_.max_work) {
    error(pos, "the template built more than " + std::to_string(limits_.max_work >> 20) +
                   " MiB of strings and lists (limit of one render)");
  }
}

void Interpreter::charge(const Value& v, size_t pos) {
  if (!v.is_string() && !v.is_list() && !v.is_dict()) return;
  const uint64_t bytes = value_bytes(v);
  check_size(bytes, pos);
  charge(bytes, pos);
}

void Interpreter::step(size_t pos) {
  if (++steps_ > limits_.max_steps) {
    error(pos, "template ran for more than " + std::to_string(limits_.max_steps) +
                   " steps (runaway loop?)");
  }
  if ((steps_ & 255) != 0) return;
  if (limits_.cancel && limits_.cancel->load(std::memory_order_relaxed))
    error(pos, "rendering cancelled (the client left)");
  if (std::chrono::steady_clock::now() > deadline_) {
    error(pos, "template ran for more than " + std::to_string(limits_.max_time.count()) +
                   " ms (limit of one render)");
  }
}

Interpreter::Nesting::Nesting(Interpreter& in, size_t pos) : in_(in) {
  // note: the count makes the limit the same on every machine; the stack check covers threads
  // with small stacks, where frames of this depth might not fit.
  if (++in.depth_ > in.limits_.max_depth)
    in.error(pos, "template nested deeper than " + std::to_string(in.limits_.max_depth) +
                      " (expressions, statements and macro calls together)");
  const char* here = static_cast<const char*>(__builtin_frame_address(0));
  if (in.stack_floor_ && here < in.stack_floor_)
    in.error(pos, "template nested too deeply for this thread's stack");
}

void Interpreter::emit(const std::string& s, size_t pos) {
  out_->append(s);
  if (out_->size() > (out_ == root_out_ ? limits_.max_output : limits_.max_value)) {
    error(pos, out_ == root_out_ ? "the rendered prompt is longer than " +
                                       std::to_string(limits_.max_output) + " bytes"
                                 : "a block's output is longer than " +
                                       std::to_string(limits_.max_value) + " bytes");
  }
  charge(s.size(), pos);
}

namespace {

// The lowest address this thread's stack may safely reach during a render: its end plus a
// margin for the frames of library calls below the interpreter (allocation, regex, printing).
const char* stack_floor() {
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return nullptr;
  void* addr = nullptr;
  size_t size = 0;
  const bool ok = pthread_attr_getstack(&attr, &addr, &size) == 0;
  pthread_attr_destroy(&attr);
  if (!ok || size < (size_t(64) << 10)) return nullptr;
  return static_cast<const char*>(addr) + std::min(size_t(256) << 10, size / 4);
}

}  // namespace

Interpreter::~Interpreter() {
  // Namespaces are the only mutable values, so the only way to build a reference cycle
  // (`set ns.me = ns`); emptying them after the render frees any such cycle.
  for (const Value& ns : namespaces_) ns.mutable_dict().items.clear();
}

void Interpreter::track_namespace(const Value& ns) {
  namespaces_.push_back(ns);
}

std::string Interpreter::render(const Dict& context) {
  Scope globals;
  add_globals(globals.vars);
  for (const auto& [k, v] : context.items) globals.vars.set(k, v);
  Scope root;
  root.parent = &globals;
  std::string out;
  scope_ = root_ = &root;
  out_ = &out;
  root_out_ = &out;
  steps_ = work_ = 0;
  call_depth_ = depth_ = 0;
  stack_floor_ = stack_floor();
  deadline_ = std::chrono::steady_clock::now() + limits_.max_time;
  exec_body(program_.body);
  scope_ = root_ = nullptr;
  out_ = nullptr;
  return out;
}

Value Interpreter::lookup(const std::string& name) const {
  for (const Scope* s = scope_; s; s = s->parent) {
    if (const Value* v = s->vars.find(name)) return *v;
  }
  return Value::undefined("'" + name + "' is undefined");
}

Interpreter::Flow Interpreter::exec_body(const Body& body) {
  for (const auto& s : body) {
    Flow f = exec(*s);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

std::string Interpreter::capture(const Body& body, Scope* scope) {
  std::string buf;
  std::string* saved_out = out_;
  Scope* saved_scope = scope_;
  out_ = &buf;
  scope_ = scope;
  exec_body(body);
  out_ = saved_out;
  scope_ = saved_scope;
  return buf;
}

Interpreter::Flow Interpreter::exec(const Stmt& s) {
  Nesting nesting(*this, s.pos);
  step(s.pos);
  switch (s.kind) {
    case Stmt::Kind::Text:
      emit(s.text, s.pos);
      return Flow::Normal;
    case Stmt::Kind::Output:
      emit(to_str(eval(*s.expr)), s.pos);
      return Flow::Normal;
    case Stmt::Kind::If:
      return exec_body(eval(*s.expr).truthy() ? s.body : s.else_body);
    case Stmt::Kind::For:
      exec_for(s);
      return Flow::Normal;
    case Stmt::Kind::Set:
      exec_set(s);
      return Flow::Normal;
    case Stmt::Kind::SetBlock: {
      Value body = capture(s.body, scope_);
      if (s.expr) {
        Scope tmp{{}, scope_};
        tmp.vars.set(kBodyName, body);
        Scope* saved = scope_;
        scope_ = &tmp;
        body = eval(*s.expr);
        scope_ = saved;
      }
      scope_->vars.set(s.targets[0], body);
      return Flow::Normal;
    }
    case Stmt::Kind::FilterBlock: {
      Scope tmp{{}, scope_};
      tmp.vars.set(kBodyName, capture(s.body, scope_));
      Scope* saved = scope_;
      scope_ = &tmp;
      Value v = eval(*s.expr);
      scope_ = saved;
      emit(to_str(v), s.pos);
      return Flow::Normal;
    }
    case Stmt::Kind::Macro: {
      const Stmt* macro = &s;
      scope_->vars.set(s.name, Function{s.name, [macro](Interpreter& in, CallArgs& args) {
                                          return in.call_macro(*macro, args, Value());
                                        }});
      return Flow::Normal;
    }
    case Stmt::Kind::CallBlock: {
      const Stmt* block = &s;
      Scope* site = scope_;
      // caller() renders the call block's body in the scope it appears in, with its own params.
      // note: the scope dies with this statement, but caller can be smuggled out through a
      // namespace; `alive` turns that later call into an error instead of a use-after-free.
      auto alive = std::make_shared<bool>(true);
      struct Expire {
        std::shared_ptr<bool> flag;
        ~Expire() { *flag = false; }
      } expire{alive};
      Value caller =
          Function{"caller", [block, site, alive](Interpreter& in, CallArgs& args) -> Value {
                     if (!*alive) in.error(args.pos, "caller() used outside its call block");
                     Scope frame{{}, site};
                     for (size_t i = 0; i < block->params.size(); ++i) {
                       Value v = i < args.args.size() ? args.args[i] : Value();
                       for (auto& [k, kv] : args.kwargs) {
                         if (k == block->params[i].name) v = kv;
                       }
                       frame.vars.set(block->params[i].name, v);
                     }
                     return in.capture(block->body, &frame);
                   }};
      const Expr& call_expr = *s.expr;
      Value callee = eval(*call_expr.args[0]);
      CallArgs args;
      args.pos = call_expr.pos;
      for (size_t i = 1; i < call_expr.args.size(); ++i) {
        args.args.push_back(eval(*call_expr.args[i]));
      }
      for (const auto& [k, v] : call_expr.kwargs) args.kwargs.emplace_back(k, eval(*v));
      args.kwargs.emplace_back("caller", caller);
      emit(to_str(call(callee, args)), s.pos);
      return Flow::Normal;
    }
    case Stmt::Kind::Break:
      return Flow::Break;
    case Stmt::Kind::Continue:
      return Flow::Continue;
  }
  return Flow::Normal;
}

void Interpreter::exec_set(const Stmt& s) {
  Value v = eval(*s.expr);
  if (!s.text.empty()) {
    Value target = lookup(s.targets[0]);
    if (!target.is_namespace()) {
      error(s.pos, "cannot assign attribute '" + s.text + "' on '" + s.targets[0] +
                       "': it is not a namespace()");
    }
    target.mutable_dict().set(s.text, std::move(v));
    return;
  }
  if (s.targets.size() == 1) {
    scope_->vars.set(s.targets[0], std::move(v));
    return;
  }
  List items = iterate(v, s.pos);
  if (items.size() != s.targets.size()) {
    error(s.pos, "cannot unpack " + std::to_string(items.size()) + " values into " +
                     std::to_string(s.targets.size()) + " names");
  }
  for (size_t i = 0; i < items.size(); ++i) scope_->vars.set(s.targets[i], items[i]);
}

void Interpreter::exec_for(const Stmt& s) {
  Value seq = eval(*s.expr);
  List items;
  try {
    items = iterate(seq, s.expr->pos);
  } catch (const Error& e) {
    error(s.expr->pos, e.what());
  }
  Scope* outer = scope_;
  auto bind = [&](Scope& frame, const Value& item) {
    if (s.targets.size() == 1) {
      frame.vars.set(s.targets[0], item);
      return;
    }
    List parts = iterate(item, s.pos);
    if (parts.size() != s.targets.size()) {
      error(s.pos, "cannot unpack " + std::to_string(parts.size()) + " values into " +
                       std::to_string(s.targets.size()) + " loop variables");
    }
    for (size_t i = 0; i < parts.size(); ++i) frame.vars.set(s.targets[i], parts[i]);
  };
  if (s.filter) {
    List kept;
    for (const Value& item : items) {
      step(s.pos);
      Scope frame{{}, outer};
      bind(frame, item);
      scope_ = &frame;
      bool keep = eval(*s.filter).truthy();
      scope_ = outer;
      if (keep) kept.push_back(item);
    }
    items = std::move(kept);
  }
  const int64_t n = int64_t(items.size());
  for (int64_t i = 0; i < n; ++i) {
    step(s.pos);
    Scope frame{{}, outer};
    bind(frame, items[size_t(i)]);
    Dict loop;
    loop.items = {{"index", i + 1},
                  {"index0", i},
                  {"revindex", n - i},
                  {"revindex0", n - i - 1},
                  {"first", i == 0},
                  {"last", i == n - 1},
                  {"length", n},
                  {"depth", 1},
                  {"depth0", 0},
                  {"previtem", i > 0 ? items[size_t(i - 1)] : Value::undefined("no previtem")},
                  {"nextitem", i + 1 < n ? items[size_t(i + 1)] : Value::undefined("no nextitem")},
                  {"cycle", Function{"cycle", [i](Interpreter& in, CallArgs& args) -> Value {
                                       if (args.args.empty())
                                         in.error(args.pos, "no items for cycling given");
                                       return args.args[size_t(i) % args.args.size()];
                                     }}}};
    frame.vars.set("loop", std::move(loop));
    scope_ = &frame;
    Flow f = exec_body(s.body);
    scope_ = outer;
    if (f == Flow::Break) break;
  }
  if (n == 0) exec_body(s.else_body);
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  Nesting nesting(*this, args.pos);
  if (callee.is_undefined()) error(args.pos, callee.as_string());
  if (!callee.is_function()) {
    error(args.pos, std::string("'") + callee.type_name() + "' object is not callable");
  }
  step(args.pos);
  return callee.as_function().call(*this, args);
}

Value Interpreter::call_macro(const Stmt& macro, CallArgs& args, const Value&) {
  if (call_depth_ >= limits_.max_call_depth) {
    error(args.pos, "macro calls nested deeper than " + std::to_string(limits_.max_call_depth) +
                        " (runaway recursion?)");
  }
  // Macros see the template's top-level variables, not the caller's locals (as in jinja2).
  Scope frame{{}, root_};
  List varargs;
  for (size_t i = 0; i < args.args.size(); ++i) {
    if (i < macro.params.size()) {
      frame.vars.set(macro.params[i].name, args.args[i]);
    } else {
      varargs.push_back(args.args[i]);
    }
  }
  Dict kwargs;
  for (auto& [k, v] : args.kwargs) {
    bool is_param = k == "caller";
    for (const Param& p : macro.params) is_param |= p.name == k;
    if (is_param) {
      frame.vars.set(k, v);
    } else {
      kwargs.set(k, v);
    }
  }
  frame.vars.set("varargs", std::move(varargs));
  frame.vars.set("kwargs", std::move(kwargs));
  Scope* saved = scope_;
  scope_ = &frame;
  ++call_depth_;
  for (const Param& p : macro.params) {
    if (frame.vars.find(p.name)) continue;
    frame.vars.set(p.name, p.default_value
                               ? eval(*p.default_value)
                               : Value::undefined("parameter '" + p.name + "' was not provided"));
  }
  scope_ = saved;
  std::string out = capture(macro.body, &frame);
  --call_depth_;
  return out;
}

}  // namespace fak::jinja
