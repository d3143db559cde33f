// Expression evaluation: names, literals, attribute/item access, calls, filters, tests and the
// short-circuiting and comparison operators.
#include "chat/jinja_builtins.h"
#include "chat/jinja_eval.h"
#include "core/error.h"

namespace fak::jinja {

Value Interpreter::eval(const Expr& e) {
  Nesting nesting(*this, e.pos);
  Value v = eval_node(e);
  // What an expression creates is charged once here (binary operators charge themselves);
  // names, attributes and items only refer to values that exist already.
  switch (e.kind) {
    case Expr::Kind::List:
    case Expr::Kind::Dict:
    case Expr::Kind::Slice:
    case Expr::Kind::Call:
    case Expr::Kind::Filter:
      charge(v, e.pos);
      break;
    default:
      break;
  }
  return v;
}

Value Interpreter::eval_node(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::Literal:
      return e.value;
    case Expr::Kind::Name:
      return lookup(e.name);
    case Expr::Kind::List: {
      List list;
      for (const auto& a : e.args) list.push_back(eval(*a));
      return list;
    }
    case Expr::Kind::Dict: {
      Dict dict;
      for (const auto& [k, v] : e.pairs) {
        Value key = eval(*k);
        if (!key.is_string()) error(k->pos, "dict keys must be strings in a chat template");
        dict.set(key.as_string(), eval(*v));
      }
      return dict;
    }
    case Expr::Kind::Unary: {
      Value v = eval(*e.args[0]);
      if (e.name == "not") return !v.truthy();
      if (v.is_undefined()) error(e.pos, v.as_string());
      if (e.name == "-") {
        if (v.is_float()) return -v.as_double();
        if (v.is_int() || v.is_bool()) {
          if (v.as_int() == INT64_MIN) error(e.pos, "integer overflow");
          return -v.as_int();
        }
      } else if (v.is_number()) {
        return v.is_float() ? v : Value(v.as_int());
      }
      error(e.pos, "bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
    }
    case Expr::Kind::Binary:
      return eval_binary(e);
    case Expr::Kind::Compare:
      return eval_compare(e);
    case Expr::Kind::Cond:
      if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
      if (e.args[2]) return eval(*e.args[2]);
      return Value::undefined("the inline if expression had no else branch");
    case Expr::Kind::Attr: {
      Value obj = eval(*e.args[0]);
      if (obj.is_undefined()) error(e.pos, obj.as_string());
      return get_attr(obj, e.name);
    }
    case Expr::Kind::Index: {
      Value obj = eval(*e.args[0]);
      if (obj.is_undefined()) error(e.pos, obj.as_string());
      return get_item(obj, eval(*e.args[1]));
    }
    case Expr::Kind::Slice:
      return eval_slice(e);
    case Expr::Kind::Call: {
      Value callee = eval(*e.args[0]);
      CallArgs args;
      args.pos = e.pos;
      for (size_t i = 1; i < e.args.size(); ++i) args.args.push_back(eval(*e.args[i]));
      for (const auto& [k, v] : e.kwargs) args.kwargs.emplace_back(k, eval(*v));
      return call(callee, args);
    }
    case Expr::Kind::Filter: {
      Value input = eval(*e.args[0]);
      CallArgs args;
      args.pos = e.pos;
      for (size_t i = 1; i < e.args.size(); ++i) args.args.push_back(eval(*e.args[i]));
      for (const auto& [k, v] : e.kwargs) args.kwargs.emplace_back(k, eval(*v));
      step(e.pos);
      try {
        return apply_filter(*this, e.name, input, args);
      } catch (const Error& err) {
        std::string what = err.what();
        if (what.rfind("chat template error at", 0) == 0) throw;
        error(e.pos, what);
      }
    }
    case Expr::Kind::Test: {
      Value subject = eval(*e.args[0]);
      CallArgs args;
      args.pos = e.pos;
      for (size_t i = 1; i < e.args.size(); ++i) args.args.push_back(eval(*e.args[i]));
      for (const auto& [k, v] : e.kwargs) args.kwargs.emplace_back(k, eval(*v));
      return apply_test(*this, e.name, subject, args) != e.negated;
    }
  }
  return Value();
}

Value Interpreter::eval_binary(const Expr& e) {
  if (e.name == "and") {
    Value a = eval(*e.args[0]);
    return a.truthy() ? eval(*e.args[1]) : a;
  }
  if (e.name == "or") {
    Value a = eval(*e.args[0]);
    return a.truthy() ? a : eval(*e.args[1]);
  }
  Value a = eval(*e.args[0]);
  Value b = eval(*e.args[1]);
  return binary_op(*this, e.name, a, b, e.pos);
}

Value Interpreter::eval_compare(const Expr& e) {
  Value left = eval(*e.args[0]);
  for (const auto& [op, expr] : e.kwargs) {
    Value right = eval(*expr);
    bool ok;
    try {
      if (op == "==") {
        ok = equal(left, right);
      } else if (op == "!=") {
        ok = !equal(left, right);
      } else if (op == "<") {
        ok = less(left, right);
      } else if (op == ">") {
        ok = less(right, left);
      } else if (op == "<=") {
        ok = !less(right, left);
      } else if (op == ">=") {
        ok = !less(left, right);
      } else if (op == "in") {
        ok = contains(right, left);
      } else {
        ok = !contains(right, left);
      }
    } catch (const Error& err) {
      error(expr->pos, err.what());
    }
    if (!ok) return false;
    left = std::move(right);
  }
  return true;
}

Value Interpreter::eval_slice(const Expr& e) {
  Value obj = eval(*e.args[0]);
  if (obj.is_undefined()) error(e.pos, obj.as_string());
  Value parts[3];
  for (int i = 0; i < 3; ++i) {
    if (e.args[size_t(i) + 1]) parts[i] = eval(*e.args[size_t(i) + 1]);
  }
  try {
    return slice(obj, parts[0], parts[1], parts[2]);
  } catch (const Error& err) {
    error(e.pos, err.what());
  }
}

}  // namespace fak::jinja
