// Filters and tests. Behaviour follows jinja2/filters.py and tests.py; tojson is transformers'
// override (json.dumps with ensure_ascii=False, no HTML escaping), which is what decides the bytes
// of tool schemas in a prompt. Over 600 lines: the filter and test table templates rely on.
#include "chat/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "chat/jinja_eval.h"
#include "chat/jinja_strings.h"
#include "core/error.h"

namespace fak::jinja {

namespace {

using Filter = Value (*)(Interpreter&, const Value&, const ArgReader&, CallArgs&);
using Test = bool (*)(Interpreter&, const Value&, const ArgReader&);

[[noreturn]] void bad_input(const std::string& filter, const Value& v) {
  fail("chat template: filter '" + filter + "' cannot be applied to " + v.type_name());
}

// Jinja's attribute paths: "a.b.0" walks dict keys and list indices.
Value lookup_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (cur.is_undefined()) return cur;
    bool numeric = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    cur = numeric && part.size() < 18 ? get_item(cur, Value(int64_t(std::stoll(part))))
                                      : get_item(cur, Value(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::String:
      return int64_t(utf8_length(v.as_string()));
    case Value::Kind::List:
      return int64_t(v.as_list().size());
    case Value::Kind::Dict:
      return int64_t(v.as_dict().items.size());
    case Value::Kind::Undefined:
      return 0;
    default:
      fail(std::string("chat template: object of type '") + v.type_name() + "' has no len()");
  }
}

// Sort key for sort/dictsort/unique: strings compare case-insensitively unless asked otherwise.
Value sort_key(const Value& v, bool case_sensitive) {
  return (!case_sensitive && v.is_string()) ? Value(py_lower(v.as_string())) : v;
}

// Shared by select/reject/selectattr/rejectattr: args after the attribute are (test, test args).
List select_items(Interpreter& in, const Value& seq, const CallArgs& call, bool by_attr,
                  bool keep_matching) {
  size_t i = 0;
  std::string attr;
  if (by_attr) {
    if (call.args.empty() || !call.args[0].is_string()) {
      fail("chat template: selectattr/rejectattr need an attribute name");
    }
    attr = call.args[0].as_string();
    i = 1;
  }
  std::string test;
  CallArgs test_args;
  test_args.pos = call.pos;
  if (i < call.args.size()) {
    if (!call.args[i].is_string()) fail("chat template: the test name must be a string");
    test = call.args[i].as_string();
    if (!has_test(test)) fail("chat template: unknown test '" + test + "'");
    test_args.args.assign(call.args.begin() + long(i) + 1, call.args.end());
  }
  List out;
  for (const Value& item : in.iterate(seq, call.pos)) {
    Value subject = by_attr ? lookup_path(item, attr) : item;
    bool ok = test.empty() ? subject.truthy() : apply_test(in, test, subject, test_args);
    if (ok == keep_matching) out.push_back(item);
  }
  return out;
}

Value f_tojson(Interpreter&, const Value& v, const ArgReader& r, CallArgs&) {
  JsonStyle style;
  Value indent = r.get(0, "indent");
  if (indent.is_int()) {
    style.indent = int(std::clamp<int64_t>(indent.as_int(), 0, 64));
  } else if (indent.is_string()) {
    style.indent_str = indent.as_string();
    style.indent_str_set = true;
  }
  // note: std::string(1, c) sidesteps a GCC 12 -Wrestrict false positive on assigning a literal.
  if (!indent.is_undefined() && !indent.is_none()) style.item_sep = std::string(1, ',');
  Value seps = r.get(99, "separators");
  if (seps.is_list() && seps.as_list().size() == 2 && seps.as_list()[0].is_string() &&
      seps.as_list()[1].is_string()) {
    style.item_sep = seps.as_list()[0].as_string();
    style.key_sep = seps.as_list()[1].as_string();
  }
  style.sort_keys = r.get_bool(99, "sort_keys", false);
  return to_json(v, style);
}

Value f_trim(Interpreter&, const Value& v, const ArgReader& r, CallArgs&) {
  Value chars = r.get(0, "chars");
  return py_strip(to_str(v), chars.is_string() ? std::optional(chars.as_string()) : std::nullopt,
                  true, true);
}

Value f_length(Interpreter&, const Value& v, const ArgReader&, CallArgs&) {
  return length_of(v);
}
Value f_upper(Interpreter&, const Value& v, const ArgReader&, CallArgs&) {
  return py_upper(to_str(v));
}
Value f_lower(Interpreter&, const Value& v, const ArgReader&, CallArgs&) {
  return py_lower(to_str(v));
}
Value f_capitalize(Interpreter&, const Value& v, const ArgReader&, CallArgs&) {
  return py_capitalize(to_str(v));
}
Value f_title(Interpreter&, const Value& v, const ArgReader&, CallArgs&) {
  return py_title(to_str(v));
}
Value f_string(Interpreter&, const Value& v, const ArgReader&, CallArgs&) {
  return to_str(v);
}
Value f_safe(Interpreter&, const Value& v, const ArgReader&, CallArgs&) {
  return Value::markup(to_str(v));
}

Value f_escape(Interpreter&, const Value& v, const ArgReader&, CallArgs&) {
  return Value::markup(v.is_markup() ? v.as_string() : html_escape(to_str(v)));
}

Value f_default(Interpreter&, const Value& v, const ArgReader& r, CallArgs&) {
  bool boolean = r.get_bool(1, "boolean", false);
  if (v.is_undefined() || (boolean && !v.truthy())) return r.get(0, "default_value", "");
  return v;
}

Value f_join(Interpreter& in, const Value& v, const ArgReader& r, CallArgs& args) {
  std::string sep = to_str(r.get(0, "d", ""));
  Value attr = r.get(1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& item : in.iterate(v, args.pos)) {
    if (!first) out += sep;
    first = false;
    out += to_str(attr.is_undefined() ? item : lookup_path(item, to_str(attr)));
    in.check_size(out.size(), args.pos);
  }
  return out;
}

Value f_first(Interpreter& in, const Value& v, const ArgReader&, CallArgs& args) {
  List items = in.iterate(v, args.pos);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(Interpreter& in, const Value& v, const ArgReader&, CallArgs& args) {
  List items = in.iterate(v, args.pos);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_items(Interpreter&, const Value& v, const ArgReader&, CallArgs&) {
  if (v.is_undefined()) return List{};
  if (!v.is_dict()) bad_input("items", v);
  List out;
  for (const auto& [k, e] : v.as_dict().items) out.emplace_back(List{Value(k), e});
  return out;
}

Value f_list(Interpreter& in, const Value& v, const ArgReader&, CallArgs& args) {
  return in.iterate(v, args.pos);
}

Value f_reverse(Interpreter& in, const Value& v, const ArgReader&, CallArgs& args) {
  if (v.is_string()) {
    std::u32string u = utf8_decode(v.as_string());
    std::reverse(u.begin(), u.end());
    return utf8_encode(u);
  }
  List items = in.iterate(v, args.pos);
  std::reverse(items.begin(), items.end());
  return items;
}

Value f_int(Interpreter&, const Value& v, const ArgReader& r, CallArgs&) {
  Value dflt = r.get(0, "default", int64_t(0));
  if (v.is_int() || v.is_bool()) return v.as_int();
  if (v.is_float()) {
    double d = v.as_double();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return dflt;
    return int64_t(d);
  }
  if (v.is_string()) {
    std::string s = py_strip(v.as_string(), std::nullopt, true, true);
    char* end = nullptr;
    errno = 0;
    long long i = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && *end == 0 && errno == 0) return int64_t(i);
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == 0 && std::isfinite(d) && std::fabs(d) < 9.2e18) return int64_t(d);
  }
  return dflt;
}

Value f_float(Interpreter&, const Value& v, const ArgReader& r, CallArgs&) {
  if (v.is_number()) return v.as_double();
  if (v.is_string()) {
    std::string s = py_strip(v.as_string(), std::nullopt, true, true);
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == 0) return d;
  }
  return r.get(0, "default", 0.0);
}

Value f_abs(Interpreter&, const Value& v, const ArgReader&, CallArgs&) {
  if (v.is_float()) return std::fabs(v.as_double());
  if ((v.is_int() || v.is_bool()) && v.as_int() != INT64_MIN) return std::abs(v.as_int());
  bad_input("abs", v);
}

Value f_round(Interpreter&, const Value& v, const ArgReader& r, CallArgs&) {
  if (!v.is_number()) bad_input("round", v);
  int64_t precision = std::clamp<int64_t>(r.get_int(0, "precision", 0), -20, 20);
  std::string method = r.get_string(1, "method", "common");
  double scale = std::pow(10.0, double(precision));
  double x = v.as_double() * scale;
  if (method == "ceil") {
    x = std::ceil(x);
  } else if (method == "floor") {
    x = std::floor(x);
  } else if (method == "common") {
    x = std::nearbyint(x);  // Python's round(): half to even
  } else {
    fail("chat template: round(): method must be common, ceil or floor");
  }
  return x / scale;
}

Value f_replace(Interpreter& in, const Value& v, const ArgReader& r, CallArgs&) {
  return py_replace(to_str(v), to_str(r.get(0, "old")), to_str(r.get(1, "new")),
                    r.get_int(2, "count", -1), in.max_size());
}

Value f_indent(Interpreter& in, const Value& v, const ArgReader& r, CallArgs& args) {
  Value width = r.get(0, "width", int64_t(4));
  std::string pad =
      width.is_string()
          ? width.as_string()
          : std::string(size_t(std::clamp<int64_t>(width.is_int() ? width.as_int() : 4, 0, 256)),
                        ' ');
  bool first = r.get_bool(1, "first", false), blank = r.get_bool(2, "blank", false);
  std::vector<std::string> lines = py_split(to_str(v), std::string("\n"), -1);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += '\n';
    if ((i > 0 || first) && (blank || !lines[i].empty())) out += pad;
    out += lines[i];
    in.check_size(out.size(), args.pos);
  }
  return out;
}

Value f_sort(Interpreter& in, const Value& v, const ArgReader& r, CallArgs& args) {
  bool reverse = r.get_bool(0, "reverse", false);
  bool case_sensitive = r.get_bool(1, "case_sensitive", false);
  Value attr = r.get(2, "attribute");
  List items = in.iterate(v, args.pos);
  auto key = [&](const Value& x) {
    return sort_key(attr.is_undefined() ? x : lookup_path(x, to_str(attr)), case_sensitive);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    return reverse ? less(key(b), key(a)) : less(key(a), key(b));
  });
  return items;
}

Value f_dictsort(Interpreter&, const Value& v, const ArgReader& r, CallArgs&) {
  if (!v.is_dict()) bad_input("dictsort", v);
  bool case_sensitive = r.get_bool(0, "case_sensitive", false);
  bool by_value = r.get_string(1, "by", "key") == "value";
  bool reverse = r.get_bool(2, "reverse", false);
  List items;
  for (const auto& [k, e] : v.as_dict().items) items.emplace_back(List{Value(k), e});
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    const Value& x = a.as_list()[by_value ? 1 : 0];
    const Value& y = b.as_list()[by_value ? 1 : 0];
    return reverse ? less(sort_key(y, case_sensitive), sort_key(x, case_sensitive))
                   : less(sort_key(x, case_sensitive), sort_key(y, case_sensitive));
  });
  return items;
}

// A hashable key for unique(), as Python's set sees values: 1, 1.0 and True are one key; lists
// and dicts are unhashable (jinja2's unique raises there too).
std::string hash_key(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::None:
      return "N";
    case Value::Kind::Bool:
    case Value::Kind::Int:
      return "n" + std::to_string(v.as_int());
    case Value::Kind::Float: {
      const double d = v.as_double();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18)
        return "n" + std::to_string(int64_t(d));
      return "f" + python_float(d);
    }
    case Value::Kind::String:
      return "s" + v.as_string();
    default:
      fail(std::string("chat template: unhashable type: '") + v.type_name() + "'");
  }
}

Value f_unique(Interpreter& in, const Value& v, const ArgReader& r, CallArgs& args) {
  bool case_sensitive = r.get_bool(0, "case_sensitive", false);
  Value attr = r.get(1, "attribute");
  List out;
  std::unordered_set<std::string> seen;
  for (const Value& item : in.iterate(v, args.pos)) {
    Value k =
        sort_key(attr.is_undefined() ? item : lookup_path(item, to_str(attr)), case_sensitive);
    if (seen.insert(hash_key(k)).second) out.push_back(item);
  }
  return out;
}

Value f_map(Interpreter& in, const Value& v, const ArgReader& r, CallArgs& args) {
  List out;
  Value attr = r.get(99, "attribute");
  if (!attr.is_undefined()) {
    Value dflt = r.get(99, "default");
    for (const Value& item : in.iterate(v, args.pos)) {
      Value x = lookup_path(item, to_str(attr));
      out.push_back(x.is_undefined() && !dflt.is_undefined() ? dflt : x);
    }
    return out;
  }
  if (args.args.empty() || !args.args[0].is_string()) {
    fail("chat template: map() needs a filter name or attribute=");
  }
  std::string filter = args.args[0].as_string();
  if (!has_filter(filter)) fail("chat template: unknown filter '" + filter + "'");
  CallArgs rest;
  rest.pos = args.pos;
  rest.args.assign(args.args.begin() + 1, args.args.end());
  rest.kwargs = args.kwargs;
  for (const Value& item : in.iterate(v, args.pos))
    out.push_back(apply_filter(in, filter, item, rest));
  return out;
}

Value f_select(Interpreter& in, const Value& v, const ArgReader&, CallArgs& a) {
  return select_items(in, v, a, false, true);
}
Value f_reject(Interpreter& in, const Value& v, const ArgReader&, CallArgs& a) {
  return select_items(in, v, a, false, false);
}
Value f_selectattr(Interpreter& in, const Value& v, const ArgReader&, CallArgs& a) {
  return select_items(in, v, a, true, true);
}
Value f_rejectattr(Interpreter& in, const Value& v, const ArgReader&, CallArgs& a) {
  return select_items(in, v, a, true, false);
}

Value f_sum(Interpreter& in, const Value& v, const ArgReader& r, CallArgs& args) {
  Value attr = r.get(0, "attribute");
  Value total = r.get(1, "start", int64_t(0));
  // As Python's sum(): strings are refused (each + would copy the whole sum: quadratic).
  if (total.is_string()) fail("chat template: sum() can't sum strings [use ''.join(seq) instead]");
  for (const Value& item : in.iterate(v, args.pos)) {
    total = binary_op(in, "+", total, attr.is_undefined() ? item : lookup_path(item, to_str(attr)),
                      args.pos);
  }
  return total;
}

Value min_max(Interpreter& in, const Value& v, const ArgReader& r, CallArgs& args, bool want_max) {
  bool case_sensitive = r.get_bool(0, "case_sensitive", false);
  Value attr = r.get(1, "attribute");
  List items = in.iterate(v, args.pos);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& x) {
    return sort_key(attr.is_undefined() ? x : lookup_path(x, to_str(attr)), case_sensitive);
  };
  Value best = items[0];
  for (const Value& item : items) {
    if (want_max ? less(key(best), key(item)) : less(key(item), key(best))) best = item;
  }
  return best;
}
Value f_min(Interpreter& in, const Value& v, const ArgReader& r, CallArgs& args) {
  return min_max(in, v, r, args, false);
}
Value f_max(Interpreter& in, const Value& v, const ArgReader& r, CallArgs& args) {
  return min_max(in, v, r, args, true);
}

Value f_format(Interpreter& in, const Value& v, const ArgReader&, CallArgs& args) {
  return binary_op(in, "%", Value(to_str(v)), Value(args.args), args.pos);
}

Value f_attr(Interpreter&, const Value& v, const ArgReader& r, CallArgs&) {
  return get_attr(v, r.get_string(0, "name"));
}

Value f_wordcount(Interpreter&, const Value& v, const ArgReader&, CallArgs&) {
  return int64_t(py_split(to_str(v), std::nullopt, -1).size());
}

struct FilterEntry {
  const char* name;
  Filter fn;
};
constexpr FilterEntry kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"capitalize", f_capitalize},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

// ---- tests ----

bool t_defined(Interpreter&, const Value& v, const ArgReader&) {
  return !v.is_undefined();
}
bool t_undefined(Interpreter&, const Value& v, const ArgReader&) {
  return v.is_undefined();
}
bool t_none(Interpreter&, const Value& v, const ArgReader&) {
  return v.is_none();
}
bool t_true(Interpreter&, const Value& v, const ArgReader&) {
  return v.is_bool() && v.as_bool();
}
bool t_false(Interpreter&, const Value& v, const ArgReader&) {
  return v.is_bool() && !v.as_bool();
}
bool t_boolean(Interpreter&, const Value& v, const ArgReader&) {
  return v.is_bool();
}
bool t_string(Interpreter&, const Value& v, const ArgReader&) {
  return v.is_string();
}
bool t_number(Interpreter&, const Value& v, const ArgReader&) {
  return v.is_number();
}
bool t_integer(Interpreter&, const Value& v, const ArgReader&) {
  return v.is_int();
}
bool t_float(Interpreter&, const Value& v, const ArgReader&) {
  return v.is_float();
}
bool t_mapping(Interpreter&, const Value& v, const ArgReader&) {
  return v.is_dict() && !v.is_namespace();
}
// note: jinja2's Undefined defines __iter__, so `undefined is iterable` is true.
bool t_iterable(Interpreter&, const Value& v, const ArgReader&) {
  return v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace()) || v.is_undefined();
}
bool t_sequence(Interpreter&, const Value& v, const ArgReader&) {
  return v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace());
}
bool t_callable(Interpreter&, const Value& v, const ArgReader&) {
  return v.is_function();
}
bool t_odd(Interpreter&, const Value& v, const ArgReader&) {
  if (!v.is_int()) bad_input("odd", v);
  return v.as_int() % 2 != 0;
}
bool t_even(Interpreter&, const Value& v, const ArgReader&) {
  if (!v.is_int()) bad_input("even", v);
  return v.as_int() % 2 == 0;
}
bool t_divisibleby(Interpreter&, const Value& v, const ArgReader& r) {
  int64_t d = r.get_int(0, "num", 0);
  if (!v.is_int() || d == 0) fail("chat template: divisibleby needs a nonzero integer");
  if (d == -1) return true;
  return v.as_int() % d == 0;
}
bool t_eq(Interpreter&, const Value& v, const ArgReader& r) {
  return equal(v, r.get(0, "other"));
}
bool t_ne(Interpreter&, const Value& v, const ArgReader& r) {
  return !equal(v, r.get(0, "other"));
}
bool t_lt(Interpreter&, const Value& v, const ArgReader& r) {
  return less(v, r.get(0, "other"));
}
bool t_gt(Interpreter&, const Value& v, const ArgReader& r) {
  return less(r.get(0, "other"), v);
}
bool t_le(Interpreter&, const Value& v, const ArgReader& r) {
  return !less(r.get(0, "other"), v);
}
bool t_ge(Interpreter&, const Value& v, const ArgReader& r) {
  return !less(v, r.get(0, "other"));
}
bool t_in(Interpreter&, const Value& v, const ArgReader& r) {
  return contains(r.get(0, "seq"), v);
}
bool t_sameas(Interpreter&, const Value& v, const ArgReader& r) {
  Value o = r.get(0, "other");
  if (v.kind() != o.kind()) return false;
  if (v.is_none() || v.is_undefined()) return true;
  if (v.is_bool()) return v.as_bool() == o.as_bool();
  return (v.is_list() || v.is_dict() || v.is_function()) && equal(v, o) &&
         (v.is_list() ? &v.as_list() == &o.as_list() : true);
}
bool t_lower(Interpreter&, const Value& v, const ArgReader&) {
  return v.is_string() && py_lower(v.as_string()) == v.as_string();
}
bool t_upper(Interpreter&, const Value& v, const ArgReader&) {
  return v.is_string() && py_upper(v.as_string()) == v.as_string();
}

struct TestEntry {
  const char* name;
  Test fn;
};
constexpr TestEntry kTests[] = {
    {"!=", t_ne},
    {"<", t_lt},
    {"<=", t_le},
    {"==", t_eq},
    {">", t_gt},
    {">=", t_ge},
    {"boolean", t_boolean},
    {"callable", t_callable},
    {"defined", t_defined},
    {"divisibleby", t_divisibleby},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"even", t_even},
    {"false", t_false},
    {"float", t_float},
    {"ge", t_ge},
    {"greaterthan", t_gt},
    {"gt", t_gt},
    {"in", t_in},
    {"integer", t_integer},
    {"iterable", t_iterable},
    {"le", t_le},
    {"lessthan", t_lt},
    {"lower", t_lower},
    {"lt", t_lt},
    {"mapping", t_mapping},
    {"ne", t_ne},
    {"none", t_none},
    {"number", t_number},
    {"odd", t_odd},
    {"sameas", t_sameas},
    {"sequence", t_sequence},
    {"string", t_string},
    {"true", t_true},
    {"undefined", t_undefined},
    {"upper", t_upper},
};

}  // namespace

bool has_filter(std::string_view name) {
  for (const auto& f : kFilters) {
    if (name == f.name) return true;
  }
  return false;
}

bool has_test(std::string_view name) {
  for (const auto& t : kTests) {
    if (name == t.name) return true;
  }
  return false;
}

Value apply_filter(Interpreter& in, const std::string& name, const Value& input, CallArgs& args) {
  for (const auto& f : kFilters) {
    if (name == f.name) return f.fn(in, input, ArgReader(args, name), args);
  }
  fail("chat template: unknown filter '" + name + "'");
}

bool apply_test(Interpreter& in, const std::string& name, const Value& subject, CallArgs& args) {
  for (const auto& t : kTests) {
    if (name == t.name) return t.fn(in, subject, ArgReader(args, name));
  }
  fail("chat template: unknown test '" + name + "'");
}

}  // namespace fak::jinja
