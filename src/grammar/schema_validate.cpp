// JSON-schema validation of a value, by the keywords' definitions; see schema_validate.h.
#include "grammar/schema_validate.h"

#include <cmath>

namespace fak::grammar {

using ojson = nlohmann::ordered_json;

namespace {

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

  // JSON Schema lengths are in code points: count the bytes that start a UTF-8 character.
  static std::string check_string(const std::string& s, const ojson& schema,
                                  const std::string& path) {
    size_t length = 0;
    for (unsigned char c : s) length += (c & 0xC0) != 0x80;
    if (auto min = schema.find("minLength"); min != schema.end() && length < min->get<size_t>())
      return path + ": shorter than minLength";
    if (auto max = schema.find("maxLength"); max != schema.end() && length > max->get<size_t>())
      return path + ": longer than maxLength";
    return "";
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
