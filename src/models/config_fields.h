// Reading one config field, checked: the helpers every family uses for config.json and GGUF
// metadata, so each refusal names the file, the key and the value the same way.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "io/gguf.h"

namespace fak {

// config.json. A positive integer of at most `max` (config.h's limits): a size is refused here,
// before anything it sizes is allocated.
int json_int(const nlohmann::json& j, const char* key, int max, const std::string& label);
int json_int_or(const nlohmann::json& j, const char* key, int fallback, int max,
                const std::string& label);
double json_number_or(const nlohmann::json& j, const char* key, double fallback,
                      const std::string& label);
bool json_bool_or(const nlohmann::json& j, const char* key, bool fallback);

// GGUF metadata. A positive integer of at most `max`.
int gguf_positive(const GgufFile& f, const std::string& key, int max);
int gguf_positive_or(const GgufFile& f, const std::string& key, int fallback, int max);

// note: callers write `ok` so that NaN fails it (every comparison with NaN is false).
void require_number(bool ok, const std::string& label, const std::string& key, const char* rule,
                    double value);

}  // namespace fak
