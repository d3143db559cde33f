// Reading request bodies, as every API front end (OpenAI, Anthropic, Responses) does it: a body
// parsed into a JSON object only after its nesting is bounded, and typed field access where
// everything a client can get wrong is a 400 naming the field (ApiError), never a JSON library
// exception.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/json.h"

namespace fak::server {

using ojson = fak::ojson;

// A request body as a JSON object: not JSON, too deeply nested or not an object is a 400.
ojson parse_json_object(const std::string& body);

// Typed field access that reports "`name` must be ..." as a 400.
std::optional<int64_t> get_int(const ojson& j, const char* name, int64_t lo, int64_t hi);
std::optional<double> get_number(const ojson& j, const char* name, double lo, double hi);
std::optional<std::string> get_string(const ojson& j, const char* name);
std::optional<bool> get_bool(const ojson& j, const char* name);

// "a string", "an array", ... for messages that say what was sent instead.
std::string json_type_name(const ojson& v);
// obj[key] when it is a string; otherwise a 400 naming `path.key`.
const std::string& required_string(const ojson& obj, const char* key, const std::string& path);

}  // namespace fak::server
