// The value model of the Jinja renderer: what a template expression evaluates to. It mirrors the
// Python objects HF transformers hands to jinja2 (None, bool, int, float, str, list, dict) plus
// Jinja's Undefined, namespace() objects and callables (macros, globals, bound methods), and the
// Python spellings of them (str(), repr(), json.dumps) that decide rendered bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/json.h"

namespace fak::jinja {

class Value;
class Interpreter;

using List = std::vector<Value>;

// Insertion-ordered string-keyed map: Python dicts keep insertion order and tojson must reproduce
// it byte for byte. Templates see small dicts, so a linear scan beats hashing.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;  // namespace() objects: the only thing `set ns.x = ...` may mutate

  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value value);
};

struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
  size_t pos = 0;  // source offset of the call, for error messages
};

struct Function {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&)> call;
};

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Function };

  Value() = default;  // Undefined with no name
  Value(std::nullptr_t) : kind_(Kind::None) {}
  Value(bool b) : kind_(Kind::Bool), int_(b) {}
  Value(int v) : kind_(Kind::Int), int_(v) {}
  Value(int64_t v) : kind_(Kind::Int), int_(v) {}
  Value(double v) : kind_(Kind::Float), float_(v) {}
  Value(std::string s) : kind_(Kind::String), str_(std::move(s)) {}
  Value(const char* s) : kind_(Kind::String), str_(s) {}
  Value(List list) : kind_(Kind::List), list_(std::make_shared<List>(std::move(list))) {}
  Value(Dict dict) : kind_(Kind::Dict), dict_(std::make_shared<Dict>(std::move(dict))) {}
  Value(Function fn) : kind_(Kind::Function), fn_(std::make_shared<Function>(std::move(fn))) {}

  // A string marked safe (jinja2's Markup, what the `safe` filter makes): `+` with a plain string
  // HTML-escapes the plain one, as Markup.__add__ / __radd__ do even with autoescape off.
  static Value markup(std::string s) {
    Value v(std::move(s));
    v.markup_ = true;
    return v;
  }
  bool is_markup() const { return markup_; }

  // An undefined value remembers why it is undefined ("'foo' is undefined") for the error raised
  // when something tries to use it.
  static Value undefined(std::string reason);
  static Value from_json(const fak::ojson& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return is_dict() && dict_->is_namespace; }
  bool is_function() const { return kind_ == Kind::Function; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }  // Bool or Int
  double as_double() const { return is_float() ? float_ : double(int_); }
  const std::string& as_string() const { return str_; }  // String, or the Undefined reason
  const List& as_list() const { return *list_; }
  const Dict& as_dict() const { return *dict_; }
  Dict& mutable_dict() const { return *dict_; }  // shared: namespaces have reference semantics
  const Function& as_function() const { return *fn_; }

  bool truthy() const;
  const char* type_name() const;  // Python's name for the type, for error messages

 private:
  Kind kind_ = Kind::Undefined;
  bool markup_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::string str_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> fn_;
};

// markupsafe.escape: & < > " ' as HTML entities.
std::string html_escape(std::string_view s);

// Python str(v): what `{{ v }}` prints. Undefined prints as "".
std::string to_str(const Value& v);
// Python repr(v): how values print inside lists and dicts.
std::string repr(const Value& v);
// Python float.__repr__ (shortest round-trip, switching to exponent form outside [1e-4, 1e16)).
std::string python_float(double d);

struct JsonStyle {
  int indent = -1;         // < 0: single line
  std::string indent_str;  // used when indent_str_set (tojson(indent="\t"))
  bool indent_str_set = false;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
// json.dumps(v, ensure_ascii=False, ...) as transformers' tojson filter calls it.
std::string to_json(const Value& v, const JsonStyle& style);

bool equal(const Value& a, const Value& b);
// Python ordering (<); throws fak::Error for types Python cannot order.
bool less(const Value& a, const Value& b);

// UTF-8 <-> code points. Invalid bytes map to U+DC80..U+DCFF and back (Python's surrogateescape),
// so slicing a string never loses or invents bytes.
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
size_t utf8_length(std::string_view s);

}  // namespace fak::jinja
