// A JSON-schema validator that checks a parsed value against a schema directly, written apart
// from the grammar compiler (it shares no code with it) so that tests can use it as a referee,
// and the server as a last check on unconstrained output. Same keyword subset as the compiler
// (numeric bounds by exact comparison, pattern on PCRE2, not on the compiler's automata);
// anything else is ignored here.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/json.h"

namespace fak::grammar {

struct ValidateOptions {
  // OpenAI strict mode: an object schema with `properties` admits no other keys even when
  // additionalProperties is absent.
  bool strict = false;
};

// "" when `instance` is valid, otherwise the first violation found and its location.
std::string schema_violation(const fak::ojson& instance, const fak::ojson& schema,
                             const ValidateOptions& options = {});

}  // namespace fak::grammar
