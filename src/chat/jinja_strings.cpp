// Python string semantics over UTF-8: operations that depend on characters (strip sets, case
// mapping) work on code points; pure substring operations (split, replace) work on bytes, which is
// equivalent for valid UTF-8.
#include "chat/jinja_strings.h"

#include <utf8proc.h>

#include "core/error.h"

namespace fak::jinja {

bool ArgReader::has(size_t i, const char* name) const {
  if (i < args_.args.size()) return true;
  for (const auto& [k, v] : args_.kwargs) {
    if (k == name) return true;
  }
  return false;
}

Value ArgReader::get(size_t i, const char* name, Value dflt) const {
  if (i < args_.args.size()) return args_.args[i];
  for (const auto& [k, v] : args_.kwargs) {
    if (k == name) return v;
  }
  return dflt;
}

std::string ArgReader::get_string(size_t i, const char* name, std::string dflt) const {
  Value v = get(i, name);
  if (v.is_undefined()) return dflt;
  if (!v.is_string()) {
    fail("chat template: " + fn_ + "(): argument '" + name + "' must be a string, not " +
         v.type_name());
  }
  return v.as_string();
}

int64_t ArgReader::get_int(size_t i, const char* name, int64_t dflt) const {
  Value v = get(i, name);
  if (v.is_undefined() || v.is_none()) return dflt;
  if (!v.is_int() && !v.is_bool()) {
    fail("chat template: " + fn_ + "(): argument '" + name + "' must be an integer, not " +
         v.type_name());
  }
  return v.as_int();
}

bool ArgReader::get_bool(size_t i, const char* name, bool dflt) const {
  Value v = get(i, name);
  return v.is_undefined() ? dflt : v.truthy();
}

bool is_py_space(char32_t c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f) || c == 0x85 ||
         c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
         c == 0x202f || c == 0x205f || c == 0x3000;
}

std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                     bool right) {
  std::u32string u = utf8_decode(s);
  std::u32string set = chars ? utf8_decode(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : is_py_space(c);
  };
  size_t b = 0, e = u.size();
  if (left) {
    while (b < e && strip_it(u[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(u[e - 1])) --e;
  }
  return utf8_encode(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep,
                                  int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) fail("chat template: split(): empty separator");
    size_t start = 0;
    while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
      size_t p = s.find(*sep, start);
      if (p == std::string::npos) break;
      out.push_back(s.substr(start, p - start));
      start = p + sep->size();
    }
    out.push_back(s.substr(start));
    return out;
  }
  std::u32string u = utf8_decode(s);
  size_t i = 0;
  while (true) {
    while (i < u.size() && is_py_space(u[i])) ++i;
    if (i >= u.size()) break;
    if (maxsplit >= 0 && int64_t(out.size()) >= maxsplit) {
      size_t e = u.size();
      while (e > i && is_py_space(u[e - 1])) --e;
      out.push_back(utf8_encode(std::u32string_view(u).substr(i, e - i)));
      break;
    }
    size_t j = i;
    while (j < u.size() && !is_py_space(u[j])) ++j;
    out.push_back(utf8_encode(std::u32string_view(u).substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<std::string> py_rsplit(const std::string& s, const std::optional<std::string>& sep,
                                   int64_t maxsplit) {
  if (maxsplit < 0) return py_split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) fail("chat template: rsplit(): empty separator");
    size_t end = s.size();
    while (int64_t(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t p = s.rfind(*sep, end - sep->size());
      if (p == std::string::npos) break;
      out.insert(out.begin(), s.substr(p + sep->size(), end - p - sep->size()));
      end = p;
    }
    out.insert(out.begin(), s.substr(0, end));
    return out;
  }
  std::u32string u = utf8_decode(s);
  size_t e = u.size();
  while (true) {
    while (e > 0 && is_py_space(u[e - 1])) --e;
    if (e == 0) break;
    if (int64_t(out.size()) >= maxsplit) {
      size_t b = 0;
      while (b < e && is_py_space(u[b])) ++b;
      out.insert(out.begin(), utf8_encode(std::u32string_view(u).substr(b, e - b)));
      break;
    }
    size_t b = e;
    while (b > 0 && !is_py_space(u[b - 1])) --b;
    out.insert(out.begin(), utf8_encode(std::u32string_view(u).substr(b, e - b)));
    e = b;
  }
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl,
                       int64_t count, size_t max_size) {
  std::string out;
  auto grow = [&](std::string_view piece) {
    out.append(piece);
    if (out.size() > max_size) fail("chat template: replace(): result too large");
  };
  if (old.empty()) {  // Python inserts repl between every character
    std::u32string u = utf8_decode(s);
    int64_t done = 0;
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || done < count) {
        grow(repl);
        ++done;
      }
      if (i < u.size()) grow(utf8_encode(std::u32string_view(u).substr(i, 1)));
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t p = s.find(old, start);
    if (p == std::string::npos) break;
    grow(std::string_view(s).substr(start, p - start));
    grow(repl);
    start = p + old.size();
    ++done;
  }
  grow(std::string_view(s).substr(start));
  return out;
}

namespace {

std::u32string map_case(std::u32string u, bool upper) {
  for (char32_t& c : u) {
    if (c >= 0xd800 && c < 0xe000) continue;  // escaped invalid bytes stay as they are
    c = char32_t(upper ? utf8proc_toupper(utf8proc_int32_t(c))
                       : utf8proc_tolower(utf8proc_int32_t(c)));
  }
  return u;
}

bool is_cased_letter(char32_t c) {
  if (c >= 0xd800 && c < 0xe000) return false;
  auto cat = utf8proc_category(utf8proc_int32_t(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

}  // namespace

std::string py_upper(const std::string& s) {
  return utf8_encode(map_case(utf8_decode(s), true));
}
std::string py_lower(const std::string& s) {
  return utf8_encode(map_case(utf8_decode(s), false));
}

std::string py_capitalize(const std::string& s) {
  std::u32string u = map_case(utf8_decode(s), false);
  if (!u.empty()) u[0] = map_case(u.substr(0, 1), true)[0];
  return utf8_encode(u);
}

std::string py_title(const std::string& s) {
  std::u32string u = utf8_decode(s);
  bool prev_cased = false;
  for (char32_t& c : u) {
    std::u32string one(1, c);
    c = map_case(one, !prev_cased)[0];
    prev_cased = is_cased_letter(c);
  }
  return utf8_encode(u);
}

std::string py_format(const std::string& fmt, const CallArgs& args, size_t max_size) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      size_t end = fmt.find('}', i);
      if (end == std::string::npos) fail("chat template: format(): unmatched '{'");
      std::string field = fmt.substr(i + 1, end - i - 1);
      if (size_t colon = field.find(':'); colon != std::string::npos) {
        if (colon + 1 != field.size()) fail("chat template: format(): format specs unsupported");
        field.resize(colon);
      }
      const Value* v = nullptr;
      if (field.empty() || (field.find_first_not_of("0123456789") == std::string::npos)) {
        size_t idx = field.empty() ? auto_index++ : std::stoul(field.substr(0, 9));
        if (idx >= args.args.size()) fail("chat template: format(): index out of range");
        v = &args.args[idx];
      } else {
        for (const auto& [k, kv] : args.kwargs) {
          if (k == field) v = &kv;
        }
        if (!v) fail("chat template: format(): missing argument '" + field + "'");
      }
      out += to_str(*v);
      if (out.size() > max_size) fail("chat template: format(): result too large");
      i = end;
    } else if (c == '}') {
      fail("chat template: format(): single '}' encountered");
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace fak::jinja
