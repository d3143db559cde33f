#include "runtime/generation_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace fak {

SamplingOptions load_generation_defaults(const std::filesystem::path& model_path) {
  SamplingOptions o;
  std::error_code ec;
  const auto file = model_path / "generation_config.json";
  if (!std::filesystem::is_directory(model_path, ec) || !std::filesystem::exists(file, ec))
    return o;
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  const std::string label = file.string();
  if (!j.is_object()) fail(label + " is not a JSON object");
  auto number = [&](const char* key, float fallback) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_number()) fail(label + ": `" + key + "` must be a number");
    return it->get<float>();
  };
  const auto sample = j.find("do_sample");
  if (sample != j.end() && !sample->is_boolean() && !sample->is_null())
    fail(label + ": `do_sample` must be a boolean");
  if (sample == j.end() || !sample->is_boolean() || !sample->get<bool>()) return o;  // greedy
  o.temperature = number("temperature", 1.0f);
  o.top_p = number("top_p", 1.0f);
  o.top_k = int(number("top_k", 50.0f));
  o.min_p = number("min_p", 0.0f);
  o.repetition_penalty = number("repetition_penalty", 1.0f);
  try {
    o.validate();
  } catch (const Error& e) {
    fail(label + ": " + e.what());
  }
  return o;
}

}  // namespace fak
