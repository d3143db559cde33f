// Attribute and item access, the Python methods templates call on str and dict values, and the
// template globals (range, namespace, dict, raise_exception, strftime_now).
#include <ctime>

#include "chat/jinja_builtins.h"
#include "chat/jinja_eval.h"
#include "chat/jinja_strings.h"
#include "core/error.h"

namespace fak::jinja {

namespace {

std::optional<std::string> opt_string(const ArgReader& r, size_t i, const char* name) {
  Value v = r.get(i, name);
  if (v.is_undefined() || v.is_none()) return std::nullopt;
  return r.get_string(i, name);
}

List to_list(const std::vector<std::string>& parts) {
  List out;
  for (const auto& p : parts) out.emplace_back(p);
  return out;
}

// Checks, before splitting, the list a split of s would make: one Value per piece, so a long
// string of separators would otherwise be a list many times its size. ASCII whitespace stands
// for all of it in the count (a bound checked again when the list is charged).
void check_split(Interpreter& in, const std::string& s, const std::optional<std::string>& sep,
                 size_t pos) {
  uint64_t pieces = 1;
  if (sep && !sep->empty()) {
    for (size_t at = s.find(*sep); at != std::string::npos; at = s.find(*sep, at + sep->size()))
      ++pieces;
  } else {
    bool in_word = false;
    for (unsigned char c : s) {
      const bool space = c == ' ' || (c >= '\t' && c <= '\r');
      if (!space && !in_word) ++pieces;
      in_word = !space;
    }
  }
  in.check_items(pieces, pos);
}

// startswith/endswith accept a string or a tuple (list) of strings.
bool affix_match(const std::string& s, const Value& affix, bool prefix, const std::string& fn) {
  if (affix.is_list()) {
    for (const Value& a : affix.as_list()) {
      if (affix_match(s, a, prefix, fn)) return true;
    }
    return false;
  }
  if (!affix.is_string()) {
    fail("chat template: " + fn + "() argument must be str or a tuple of str, not " +
         affix.type_name());
  }
  const std::string& a = affix.as_string();
  if (a.size() > s.size()) return false;
  return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
}

Value string_method(const std::string& s, const std::string& name, Interpreter& in,
                    CallArgs& args) {
  ArgReader r(args, name);
  if (name == "startswith" || name == "endswith") {
    return affix_match(s, r.get(0, "prefix"), name == "startswith", name);
  }
  if (name == "strip") return py_strip(s, opt_string(r, 0, "chars"), true, true);
  if (name == "lstrip") return py_strip(s, opt_string(r, 0, "chars"), true, false);
  if (name == "rstrip") return py_strip(s, opt_string(r, 0, "chars"), false, true);
  if (name == "split") {
    check_split(in, s, opt_string(r, 0, "sep"), args.pos);
    return to_list(py_split(s, opt_string(r, 0, "sep"), r.get_int(1, "maxsplit", -1)));
  }
  if (name == "rsplit") {
    check_split(in, s, opt_string(r, 0, "sep"), args.pos);
    return to_list(py_rsplit(s, opt_string(r, 0, "sep"), r.get_int(1, "maxsplit", -1)));
  }
  if (name == "splitlines") {
    check_split(in, s, std::string("\n"), args.pos);
    std::vector<std::string> lines = py_split(s, std::string("\n"), -1);
    if (!lines.empty() && lines.back().empty()) lines.pop_back();
    return to_list(lines);
  }
  if (name == "replace") {
    return py_replace(s, r.get_string(0, "old"), r.get_string(1, "new"), r.get_int(2, "count", -1),
                      in.max_size());
  }
  if (name == "upper") return py_upper(s);
  if (name == "lower") return py_lower(s);
  if (name == "title") return py_title(s);
  if (name == "capitalize") return py_capitalize(s);
  if (name == "format") return py_format(s, args, in.max_size());
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const Value& v : in.iterate(r.get(0, "iterable"), args.pos)) {
      if (!v.is_string())
        fail("chat template: join(): expected str instance, " + std::string(v.type_name()) +
             " found");
      if (!first) out += s;
      first = false;
      out += v.as_string();
      in.check_size(out.size(), args.pos);
    }
    return out;
  }
  if (name == "find" || name == "rfind" || name == "count") {
    std::string sub = r.get_string(0, "sub");
    if (name == "count") {
      if (sub.empty()) return int64_t(utf8_length(s) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return n;
    }
    size_t p = name == "find" ? s.find(sub) : s.rfind(sub);
    return p == std::string::npos ? int64_t(-1) : int64_t(utf8_length(s.substr(0, p)));
  }
  auto all_of = [&](auto pred) {
    std::u32string u = utf8_decode(s);
    if (u.empty()) return false;
    for (char32_t c : u) {
      if (!pred(c)) return false;
    }
    return true;
  };
  if (name == "isdigit") return all_of([](char32_t c) { return c >= '0' && c <= '9'; });
  if (name == "isspace") return all_of(is_py_space);
  if (name == "isalpha") {
    return all_of([](char32_t c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; });
  }
  fail("chat template: 'str' object has no attribute '" + name + "'");
}

List dict_items(const Dict& d) {
  List out;
  for (const auto& [k, v] : d.items) out.emplace_back(List{Value(k), v});
  return out;
}

Value dict_method(const Value& obj, const std::string& name, CallArgs& args) {
  const Dict& d = obj.as_dict();
  ArgReader r(args, name);
  if (name == "get") {
    Value key = r.get(0, "key");
    const Value* v = key.is_string() ? d.find(key.as_string()) : nullptr;
    return v ? *v : r.get(1, "default", nullptr);
  }
  if (name == "items") return dict_items(d);
  if (name == "keys") {
    List out;
    for (const auto& [k, v] : d.items) out.emplace_back(k);
    return out;
  }
  List out;  // values
  for (const auto& [k, v] : d.items) out.push_back(v);
  return out;
}

bool is_string_method(const std::string& n) {
  static const char* kNames[] = {
      "startswith", "endswith", "strip", "lstrip",  "rstrip",     "split",   "rsplit",
      "replace",    "upper",    "lower", "title",   "capitalize", "format",  "join",
      "find",       "rfind",    "count", "isdigit", "isspace",    "isalpha", "splitlines"};
  for (const char* k : kNames) {
    if (n == k) return true;
  }
  return false;
}

bool is_dict_method(const std::string& n) {
  return n == "get" || n == "items" || n == "keys" || n == "values";
}

Value bind(const Value& obj, const std::string& name) {
  return Function{name, [obj, name](Interpreter& in, CallArgs& args) -> Value {
                    if (obj.is_string()) return string_method(obj.as_string(), name, in, args);
                    return dict_method(obj, name, args);
                  }};
}

std::string describe_type(const Value& v) {
  return std::string("'") + v.type_name() + " object'";
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_dict()) {
    if (!obj.is_namespace() && is_dict_method(name)) return bind(obj, name);
    if (const Value* v = obj.as_dict().find(name)) return *v;
  } else if (obj.is_string() && is_string_method(name)) {
    return bind(obj, name);
  }
  return Value::undefined(describe_type(obj) + " has no attribute '" + name + "'");
}

Value get_item(const Value& obj, const Value& key) {
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      int64_t n = int64_t(obj.as_list().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.as_list()[size_t(i)];
    } else {
      std::u32string u = utf8_decode(obj.as_string());
      int64_t n = int64_t(u.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return utf8_encode(std::u32string_view(u).substr(size_t(i), 1));
    }
    return Value::undefined(describe_type(obj) + " has no element " + std::to_string(key.as_int()));
  }
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined(describe_type(obj) + " has no element " + repr(key));
}

void add_globals(Dict& g) {
  g.set("range", Function{"range", [](Interpreter& in, CallArgs& args) -> Value {
                            ArgReader r(args, "range");
                            int64_t start = 0, stop, step = 1;
                            if (args.args.size() <= 1) {
                              stop = r.get_int(0, "stop", 0);
                            } else {
                              start = r.get_int(0, "start", 0);
                              stop = r.get_int(1, "stop", 0);
                              step = r.get_int(2, "step", 1);
                            }
                            if (step == 0) in.error(args.pos, "range() arg 3 must not be zero");
                            // As jinja2's sandbox (MAX_RANGE): a range of more than 100000 items
                            // is an error, counted before one is made.
                            constexpr int64_t kMaxRange = 100000;
                            const __int128 span =
                                step > 0 ? __int128(stop) - start : __int128(start) - stop;
                            const __int128 abs_step = step > 0 ? step : -__int128(step);
                            const __int128 count = span <= 0 ? 0 : (span + abs_step - 1) / abs_step;
                            if (count > kMaxRange)
                              in.error(args.pos, "range too big: the sandbox allows " +
                                                     std::to_string(kMaxRange) + " items");
                            List out;
                            out.reserve(size_t(count));
                            for (int64_t k = 0; k < int64_t(count); ++k) {
                              out.emplace_back(int64_t(__int128(start) + __int128(k) * step));
                              in.step(args.pos);
                            }
                            return out;
                          }});
  auto make_dict = [](bool ns) {
    return [ns](Interpreter& in, CallArgs& args) -> Value {
      Dict d;
      d.is_namespace = ns;
      for (const Value& a : args.args) {  // namespace({...}) / dict({...}) copy a mapping
        if (!a.is_dict()) in.error(args.pos, "expected a mapping argument");
        for (const auto& [k, v] : a.as_dict().items) d.set(k, v);
      }
      for (const auto& [k, v] : args.kwargs) d.set(k, v);
      Value out(std::move(d));
      if (ns) in.track_namespace(out);
      return out;
    };
  };
  g.set("namespace", Function{"namespace", make_dict(true)});
  g.set("dict", Function{"dict", make_dict(false)});
  g.set("raise_exception", Function{"raise_exception", [](Interpreter&, CallArgs& args) -> Value {
                                      std::string msg =
                                          args.args.empty() ? "" : to_str(args.args[0]);
                                      fail("chat template raised an exception: " + msg);
                                    }});
  g.set("strftime_now",
        Function{"strftime_now", [](Interpreter& in, CallArgs& args) -> Value {
                   ArgReader r(args, "strftime_now");
                   std::string fmt = r.get_string(0, "format");
                   std::tm tm{};
                   if (in.pinned_now()) {
                     tm = *in.pinned_now();
                   } else {
                     const std::time_t t = std::time(nullptr);
                     localtime_r(&t, &tm);
                   }
                   char buf[512];
                   size_t n = fmt.empty() ? 0 : std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
                   if (n == 0 && !fmt.empty())
                     in.error(args.pos, "strftime_now: format too long or empty result");
                   return std::string(buf, n);
                 }});
}

}  // namespace fak::jinja
