// JSON-schema validation of a value, by the keywords' definitions; see schema_validate.h.
// Patterns run on PCRE2 after a rewrite of what ECMA-262 means differently (ecma_to_pcre2).
#include "grammar/schema_validate.h"

#include "core/json.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cmath>
#include <map>
#include <memory>

namespace fak::grammar {

using ojson = fak::ojson;

namespace {

// ECMA-262's \s: WhiteSpace and LineTerminator, as the inside of a PCRE2 class.
constexpr const char* kEcmaSpace =
    "\\t-\\r \\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"
    "\\x{feff}";

bool hex_digit(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// An ECMA-262 pattern (read with the "u" flag) rewritten for PCRE2 in UTF mode with
// PCRE2_DOLLAR_ENDONLY, where these differ: `.` (ECMA: not \n \r U+2028 U+2029), \s and \S
// (ECMA's Unicode set; PCRE2's is ASCII), \v (a character, not a class), \u escapes (joined
// surrogate pairs), \0, and classes ([] matches nothing, [^] anything, '[' inside is literal).
std::string ecma_to_pcre2(const std::string& p) {
  std::string out;
  // After a backslash at p[i]: the escape's PCRE2 spelling; i moves to its last character.
  const auto escape = [&](size_t& i) -> std::string {
    const char c = p[++i];
    if (c == 'v') return "\\x{0b}";
    if (c == '0') return "\\x{0}";
    if (c == 'u') {
      const auto hex_run = [&](size_t at, size_t n) {
        if (at + n > p.size()) return false;
        for (size_t k = 0; k < n; ++k)
          if (!hex_digit(p[at + k])) return false;
        return true;
      };
      if (i + 1 < p.size() && p[i + 1] == '{') {
        const size_t close = p.find('}', i);
        if (close == std::string::npos) return "\\u";  // PCRE2 refuses it too
        const std::string hex = p.substr(i + 2, close - i - 2);
        i = close;
        return "\\x{" + hex + "}";
      }
      if (hex_run(i + 1, 4)) {
        unsigned v = unsigned(std::stoul(p.substr(i + 1, 4), nullptr, 16));
        i += 4;
        if (v >= 0xD800 && v <= 0xDBFF && i + 2 < p.size() && p[i + 1] == '\\' && p[i + 2] == 'u' &&
            hex_run(i + 3, 4)) {
          const unsigned low = unsigned(std::stoul(p.substr(i + 3, 4), nullptr, 16));
          if (low >= 0xDC00 && low <= 0xDFFF) {
            v = 0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00);
            i += 6;
          }
        }
        char buf[16];
        std::snprintf(buf, sizeof buf, "\\x{%x}", v);
        return buf;
      }
    }
    return std::string("\\") + c;
  };
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      if (p[i + 1] == 's') {
        out += std::string("[") + kEcmaSpace + "]";
        ++i;
      } else if (p[i + 1] == 'S') {
        out += std::string("[^") + kEcmaSpace + "]";
        ++i;
      } else {
        out += escape(i);
      }
      continue;
    }
    if (c == '.') {
      out += "[^\\n\\r\\x{2028}\\x{2029}]";
      continue;
    }
    if (c != '[') {
      out += c;
      continue;
    }
    // A class: its items in PCRE2 spelling; a \S among them cannot go inside PCRE2's brackets.
    size_t j = i + 1;
    const bool negate = j < p.size() && p[j] == '^';
    if (negate) ++j;
    std::string items;
    bool non_space = false;
    for (; j < p.size() && p[j] != ']'; ++j) {
      if (p[j] == '\\' && j + 1 < p.size()) {
        if (p[j + 1] == 's') {
          items += kEcmaSpace;
          ++j;
        } else if (p[j + 1] == 'S') {
          non_space = true;
          ++j;
        } else if (p[j + 1] == 'b') {
          items += "\\x{8}";
          ++j;
        } else {
          items += escape(j);
        }
      } else if (p[j] == '[') {
        items += "\\[";
      } else {
        items += p[j];
      }
    }
    i = j;  // on the closing ']'
    const std::string set = items.empty() ? "(?!)" : "[" + items + "]";
    const std::string space = std::string("[") + kEcmaSpace + "]";
    if (!negate) {
      out += non_space ? "(?:" + set + "|[^" + kEcmaSpace + "])" : set;
    } else if (!non_space) {
      out += items.empty() ? "(?s:.)" : "[^" + items + "]";
    } else {
      out += items.empty() ? space : "(?:(?!" + set + ")" + space + ")";
    }
  }
  return out;
}

// -1, 0, 1. long double holds every int64, uint64 and double exactly (x86-64's 64-bit mantissa).
int compare_numbers(const ojson& a, const ojson& b) {
  const auto wide = [](const ojson& x) -> long double {
    if (x.is_number_unsigned()) return static_cast<long double>(x.get<uint64_t>());
    if (x.is_number_integer()) return static_cast<long double>(x.get<int64_t>());
    return static_cast<long double>(x.get<double>());
  };
  const long double x = wide(a), y = wide(b);
  return (x > y) - (x < y);
}

struct Pcre2Deleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};

class Validator {
 public:
  Validator(const ojson& root, const ValidateOptions& options) : root_(root), options_(options) {}

  std::string check(const ojson& value, const ojson& schema, const std::string& path,
                    int depth) const {
    if (depth > 200) return path + ": schema recursion too deep";
    if (schema.is_boolean()) return schema.get<bool>() ? "" : path + ": schema false";
    if (!schema.is_object()) return path + ": schema is not an object";

    if (auto ref = schema.find("$ref"); ref != schema.end()) {
      const std::string target = ref->get<std::string>();
      if (target.empty() || target[0] != '#') return path + ": non-local $ref " + target;
      const ojson::json_pointer pointer(target.substr(1));
      if (std::string e = check(value, root_.at(pointer), path, depth + 1); !e.empty()) return e;
    }
    if (auto all = schema.find("allOf"); all != schema.end()) {
      for (const auto& sub : *all)
        if (std::string e = check(value, sub, path, depth + 1); !e.empty()) return e;
    }
    if (auto any = schema.find("anyOf"); any != schema.end()) {
      bool matched = false;
      for (const auto& sub : *any) matched = matched || check(value, sub, path, depth + 1).empty();
      if (!matched) return path + ": matches no anyOf alternative";
    }
    if (auto one = schema.find("oneOf"); one != schema.end()) {
      int matches = 0;
      for (const auto& sub : *one) matches += check(value, sub, path, depth + 1).empty();
      if (matches != 1) return path + ": matches " + std::to_string(matches) + " oneOf subschemas";
    }
    if (auto e = schema.find("enum"); e != schema.end()) {
      bool found = false;
      for (const auto& candidate : *e) found = found || candidate == value;
      if (!found) return path + ": not one of the enum values";
    }
    if (auto c = schema.find("const"); c != schema.end() && *c != value)
      return path + ": not the const value";
    if (auto type = schema.find("type"); type != schema.end()) {
      bool ok = false;
      if (type->is_string()) {
        ok = has_type(value, type->get<std::string>());
      } else {
        for (const auto& t : *type) ok = ok || has_type(value, t.get<std::string>());
      }
      if (!ok) return path + ": wrong type, expected " + type->dump();
    }
    if (value.is_number()) return check_number(value, schema, path);
    if (value.is_string()) return check_string(value.get<std::string>(), schema, path);
    if (value.is_array()) return check_array(value, schema, path, depth);
    if (value.is_object()) return check_object(value, schema, path, depth);
    return "";
  }

 private:
  static bool has_type(const ojson& value, const std::string& type) {
    if (type == "string") return value.is_string();
    if (type == "number") return value.is_number();
    if (type == "integer") {
      if (value.is_number_integer()) return true;
      if (!value.is_number_float()) return false;
      const double x = value.get<double>();
      return std::isfinite(x) && x == std::trunc(x);
    }
    if (type == "boolean") return value.is_boolean();
    if (type == "null") return value.is_null();
    if (type == "object") return value.is_object();
    if (type == "array") return value.is_array();
    return false;
  }

  // minimum / maximum, exclusive or not; draft 4's boolean exclusiveMinimum / exclusiveMaximum
  // make minimum / maximum exclusive.
  static std::string check_number(const ojson& value, const ojson& schema,
                                  const std::string& path) {
    for (const bool lower : {true, false}) {
      const char* key = lower ? "minimum" : "maximum";
      const char* exclusive_key = lower ? "exclusiveMinimum" : "exclusiveMaximum";
      const auto inclusive = schema.find(key), exclusive = schema.find(exclusive_key);
      const bool draft4 =
          exclusive != schema.end() && exclusive->is_boolean() && exclusive->get<bool>();
      const auto breaks = [&](const ojson& bound, bool strict) {
        const int c = compare_numbers(value, bound) * (lower ? 1 : -1);
        return c < 0 || (c == 0 && strict);
      };
      if (inclusive != schema.end() && inclusive->is_number() && breaks(*inclusive, draft4))
        return path + ": " + (lower ? "below " : "above ") + (draft4 ? exclusive_key : key) + " " +
               inclusive->dump();
      if (exclusive != schema.end() && exclusive->is_number() && breaks(*exclusive, true))
        return path + ": not " + (lower ? "above " : "below ") + exclusive_key + " " +
               exclusive->dump();
    }
    return "";
  }

  // JSON Schema lengths are in code points: count the bytes that start a UTF-8 character.
  std::string check_string(const std::string& s, const ojson& schema,
                           const std::string& path) const {
    size_t length = 0;
    for (unsigned char c : s) length += (c & 0xC0) != 0x80;
    if (auto min = schema.find("minLength"); min != schema.end() && length < min->get<size_t>())
      return path + ": shorter than minLength";
    if (auto max = schema.find("maxLength"); max != schema.end() && length > max->get<size_t>())
      return path + ": longer than maxLength";
    if (auto pattern = schema.find("pattern"); pattern != schema.end() && pattern->is_string())
      return check_pattern(s, pattern->get<std::string>(), path);
    return "";
  }

  // ECMA-262 search semantics: the pattern may match anywhere unless it anchors itself.
  std::string check_pattern(const std::string& s, const std::string& pattern,
                            const std::string& path) const {
    auto& code = patterns_[pattern];
    if (!code) {
      int error = 0;
      PCRE2_SIZE offset = 0;
      const std::string translated = ecma_to_pcre2(pattern);
      code.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                               PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, &error, &offset, nullptr));
      if (!code) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(error, message, sizeof message);
        return path + ": pattern " + ojson(pattern).dump() + " does not compile (" +
               reinterpret_cast<const char*>(message) + ")";
      }
    }
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(code.get(), nullptr);
    const int rc = pcre2_match(code.get(), reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0,
                               match, nullptr);
    pcre2_match_data_free(match);
    if (rc >= 0) return "";
    if (rc == PCRE2_ERROR_NOMATCH)
      return path + ": does not match pattern " + ojson(pattern).dump();
    return path + ": pattern " + ojson(pattern).dump() + " could not be run (PCRE2 error " +
           std::to_string(rc) + ")";
  }

  std::string check_array(const ojson& value, const ojson& schema, const std::string& path,
                          int depth) const {
    if (auto min = schema.find("minItems");
        min != schema.end() && value.size() < min->get<size_t>())
      return path + ": fewer items than minItems";
    if (auto max = schema.find("maxItems");
        max != schema.end() && value.size() > max->get<size_t>())
      return path + ": more items than maxItems";
    if (auto items = schema.find("items"); items != schema.end() && !items->is_array()) {
      for (size_t i = 0; i < value.size(); ++i)
        if (std::string e = check(value[i], *items, path + "/" + std::to_string(i), depth + 1);
            !e.empty())
          return e;
    }
    return "";
  }

  std::string check_object(const ojson& value, const ojson& schema, const std::string& path,
                           int depth) const {
    const auto properties = schema.find("properties");
    if (auto required = schema.find("required"); required != schema.end()) {
      for (const auto& name : *required)
        if (!value.contains(name.get<std::string>()))
          return path + ": missing required property " + name.dump();
    }
    const auto additional = schema.find("additionalProperties");
    for (const auto& [key, member] : value.items()) {
      const std::string member_path = path + "/" + key;
      if (properties != schema.end() && properties->contains(key)) {
        if (std::string e = check(member, (*properties)[key], member_path, depth + 1); !e.empty())
          return e;
        continue;
      }
      if (additional != schema.end()) {
        if (std::string e = check(member, *additional, member_path, depth + 1); !e.empty())
          return e;
      } else if (options_.strict && properties != schema.end()) {
        return member_path + ": property not in the schema (strict)";
      }
    }
    return "";
  }

  const ojson& root_;
  ValidateOptions options_;
  mutable std::map<std::string, std::unique_ptr<pcre2_code, Pcre2Deleter>> patterns_;
};

}  // namespace

std::string schema_violation(const ojson& instance, const ojson& schema,
                             const ValidateOptions& options) {
  try {
    return Validator(schema, options).check(instance, schema, "#", 0);
  } catch (const nlohmann::json::exception& e) {
    return std::string("schema could not be read: ") + e.what();
  }
}

}  // namespace fak::grammar
