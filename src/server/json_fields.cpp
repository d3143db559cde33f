#include "server/json_fields.h"

#include <algorithm>
#include <cmath>

#include "server/api_error.h"

namespace fak::server {

std::string json_type_name(const ojson& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

const std::string& required_string(const ojson& obj, const char* key, const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string())
    bad_request("`" + path + "." + key + "` must be a string", path + "." + key);
  return it->get_ref<const std::string&>();
}

ojson parse_json_object(const std::string& body) {
  if (json_depth(body) > kMaxJsonDepth)
    bad_request("the request body nests arrays and objects deeper than " +
                std::to_string(kMaxJsonDepth) + " levels");
  ojson j;
  try {
    j = ojson::parse(body);
  } catch (const ojson::exception& e) {
    // nlohmann rejects ill-formed UTF-8 inside strings here too, with a message that says so; a
    // number too large for a double is out_of_range, not parse_error (found by the fuzzer).
    bad_request(std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!j.is_object())
    bad_request("the request body must be a JSON object, not " + json_type_name(j));
  return j;
}

std::optional<int64_t> get_int(const ojson& j, const char* name, int64_t lo, int64_t hi) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return std::nullopt;
  // note: 5.0 is accepted as 5 (JS clients send numbers); 5.5 is not.
  int64_t v = 0;
  if (it->is_number_integer()) {
    v = it->get<int64_t>();
  } else if (it->is_number_float() && it->get<double>() == double(int64_t(it->get<double>())) &&
             std::abs(it->get<double>()) < 9e15) {
    v = int64_t(it->get<double>());
  } else {
    bad_request(std::string("`") + name + "` must be an integer, not " + json_type_name(*it), name);
  }
  if (v < lo || v > hi)
    bad_request(std::string("`") + name + "` must be in [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + "], got " + std::to_string(v),
                name);
  return v;
}

std::optional<double> get_number(const ojson& j, const char* name, double lo, double hi) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number())
    bad_request(std::string("`") + name + "` must be a number, not " + json_type_name(*it), name);
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi))
    bad_request(std::string("`") + name + "` must be in [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + "]",
                name);
  return v;
}

std::optional<std::string> get_string(const ojson& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_string())
    bad_request(std::string("`") + name + "` must be a string, not " + json_type_name(*it), name);
  return it->get<std::string>();
}

std::optional<bool> get_bool(const ojson& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean())
    bad_request(std::string("`") + name + "` must be a boolean, not " + json_type_name(*it), name);
  return it->get<bool>();
}

}  // namespace fak::server
