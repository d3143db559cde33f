// Value construction, truthiness, comparison and the Python spellings (str, repr, json.dumps).
#include "chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/json.h"
#include "tokenizer/utf8.h"

namespace fak::jinja {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

Value Value::undefined(std::string reason) {
  Value v;
  v.str_ = std::move(reason);
  return v;
}

Value Value::from_json(const fak::ojson& j) {
  using T = fak::ojson::value_t;
  switch (j.type()) {
    case T::null:
    case T::discarded:
      return nullptr;
    case T::boolean:
      return j.get<bool>();
    case T::number_integer:
      return j.get<int64_t>();
    case T::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      // note: Python ints are unbounded; past int64 a float is the closest we keep.
      if (u > uint64_t(INT64_MAX)) return double(u);
      return int64_t(u);
    }
    case T::number_float:
      return j.get<double>();
    case T::string:
      return j.get<std::string>();
    case T::array: {
      List list;
      list.reserve(j.size());
      for (const auto& e : j) list.push_back(from_json(e));
      return list;
    }
    case T::object: {
      Dict dict;
      dict.items.reserve(j.size());
      for (const auto& [k, e] : j.items()) dict.items.emplace_back(k, from_json(e));
      return dict;
    }
    case T::binary:
      fail("chat template: binary JSON values are not supported");
  }
  return nullptr;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
    case Kind::Int:
      return int_ != 0;
    case Kind::Float:
      return float_ != 0;
    case Kind::String:
      return !str_.empty();
    case Kind::List:
      return !list_->empty();
    case Kind::Dict:
      return dict_->is_namespace || !dict_->items.empty();
    case Kind::Function:
      return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "NoneType";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::String:
      return "str";
    case Kind::List:
      return "list";
    case Kind::Dict:
      return dict_->is_namespace ? "Namespace" : "dict";
    case Kind::Function:
      return "function";
  }
  return "?";
}

std::string python_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // shortest round-trip digits: [-]D[.DDD]e[+-]XX
  std::string out;
  size_t i = 0;
  if (sci[0] == '-') {
    out += '-';
    i = 1;
  }
  size_t e = sci.find('e');
  std::string digits;
  for (size_t k = i; k < e; ++k) {
    if (sci[k] != '.') digits += sci[k];
  }
  int exp = std::stoi(sci.substr(e + 1));
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      std::string int_part = digits.substr(0, std::min(digits.size(), size_t(exp) + 1));
      int_part.append(size_t(exp) + 1 - int_part.size(), '0');
      std::string frac = digits.size() > size_t(exp) + 1 ? digits.substr(exp + 1) : "0";
      out += int_part + "." + frac;
    } else {
      out += "0." + std::string(size_t(-exp - 1), '0') + digits;
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  return out;
}

namespace {

std::string repr_string(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == quote) {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += char(c);
    }
  }
  out += quote;
  return out;
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

void json_dump(const Value& v, const JsonStyle& style, int depth, std::string& out) {
  auto newline = [&](int level) {
    if (style.indent < 0 && !style.indent_str_set) return;
    out += '\n';
    const std::string unit =
        style.indent_str_set ? style.indent_str : std::string(size_t(style.indent), ' ');
    for (int i = 0; i < level; ++i) out += unit;
  };
  check(depth < 512, "chat template: tojson: value nested too deeply");
  switch (v.kind()) {
    case Value::Kind::None:
      out += "null";
      return;
    case Value::Kind::Bool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::Int:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::Float: {
      double d = v.as_double();
      if (std::isnan(d)) {
        out += "NaN";
      } else if (std::isinf(d)) {
        out += d < 0 ? "-Infinity" : "Infinity";
      } else {
        out += python_float(d);
      }
      return;
    }
    case Value::Kind::String:
      json_string(v.as_string(), out);
      return;
    case Value::Kind::List: {
      const List& list = v.as_list();
      if (list.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < list.size(); ++i) {
        if (i) out += style.item_sep;
        newline(depth + 1);
        json_dump(list[i], style, depth + 1, out);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      check(!v.is_namespace(), "chat template: tojson: Namespace is not JSON serializable");
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.as_dict().items) items.push_back(&kv);
      if (style.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      if (items.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += style.item_sep;
        newline(depth + 1);
        json_string(items[i]->first, out);
        out += style.key_sep;
        json_dump(items[i]->second, style, depth + 1, out);
      }
      newline(depth);
      out += '}';
      return;
    }
    case Value::Kind::Undefined:
      fail("chat template: tojson: Undefined is not JSON serializable" +
           (v.as_string().empty() ? std::string() : " (" + v.as_string() + ")"));
    case Value::Kind::Function:
      fail("chat template: tojson: function is not JSON serializable");
  }
}

void repr_into(const Value& v, int depth, std::string& out) {
  check(depth < 512, "chat template: value nested too deeply to print");
  switch (v.kind()) {
    case Value::Kind::String:
      out += repr_string(v.as_string());
      return;
    case Value::Kind::List: {
      out += '[';
      const List& list = v.as_list();
      for (size_t i = 0; i < list.size(); ++i) {
        if (i) out += ", ";
        repr_into(list[i], depth + 1, out);
      }
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      if (v.is_namespace()) out += "<Namespace ";
      out += '{';
      bool first = true;
      for (const auto& [k, e] : v.as_dict().items) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(k) + ": ";
        repr_into(e, depth + 1, out);
      }
      out += '}';
      if (v.is_namespace()) out += '>';
      return;
    }
    default:
      out += to_str(v);
  }
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return "";
    case Value::Kind::None:
      return "None";
    case Value::Kind::Bool:
      return v.as_bool() ? "True" : "False";
    case Value::Kind::Int:
      return std::to_string(v.as_int());
    case Value::Kind::Float:
      return python_float(v.as_double());
    case Value::Kind::String:
      return v.as_string();
    case Value::Kind::Function:
      return "<function " + v.as_function().name + ">";
    case Value::Kind::List:
    case Value::Kind::Dict:
      return repr(v);
  }
  return "";
}

std::string repr(const Value& v) {
  std::string out;
  repr_into(v, 0, out);
  return out;
}

std::string to_json(const Value& v, const JsonStyle& style) {
  std::string out;
  json_dump(v, style, 0, out);
  return out;
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return true;
    case Value::Kind::String:
      return a.as_string() == b.as_string();
    case Value::Kind::List: {
      const List &x = a.as_list(), &y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!equal(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::Dict: {
      if (a.is_namespace() || b.is_namespace()) return &a.as_dict() == &b.as_dict();
      const Dict &x = a.as_dict(), &y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, e] : x.items) {
        const Value* other = y.find(k);
        if (!other || !equal(e, *other)) return false;
      }
      return true;
    }
    case Value::Kind::Function:
      return &a.as_function() == &b.as_function();
    default:
      return false;
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list()) {
    const List &x = a.as_list(), &y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equal(x[i], y[i])) return less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  if (a.is_undefined()) fail("chat template: " + a.as_string());
  if (b.is_undefined()) fail("chat template: " + b.as_string());
  fail(std::string("chat template: '<' not supported between instances of '") + a.type_name() +
       "' and '" + b.type_name() + "'");
}

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    bool ok = len > 0 && i + len <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      unsigned char cc = s[i + k];
      if ((cc & 0xc0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    // Reject overlong forms and surrogates so encode(decode(s)) == s for every input.
    if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
               (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp < 0xe000))) {
      ok = false;
    }
    if (!ok) {
      out += char32_t(0xdc00 + c);
      i += 1;
    } else {
      out += cp;
      i += len;
    }
  }
  return out;
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) {
    if (cp >= 0xdc80 && cp <= 0xdcff) {
      out += char(cp - 0xdc00);
    } else {
      append_utf8(out, cp);
    }
  }
  return out;
}

size_t utf8_length(std::string_view s) {
  return utf8_decode(s).size();
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace fak::jinja
