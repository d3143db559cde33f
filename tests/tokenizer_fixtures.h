// Fixtures shared by the tokenizer tests, loaded once per test binary (the Qwen tokenizer.json is
// 11 MB and takes a moment to parse).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace fak::test {

inline const Tokenizer& qwen_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::from_dir(data_path("tokenizer/qwen"));
  return tokenizer;
}

inline const Tokenizer& pycoder_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::from_dir(source_path("models/pycoder-6m"));
  return tokenizer;
}

inline const nlohmann::json& load_json(const std::string& relative) {
  static std::map<std::string, nlohmann::json> cache;
  auto it = cache.find(relative);
  if (it == cache.end()) {
    it = cache.emplace(relative, nlohmann::json::parse(read_file(data_path(relative)))).first;
  }
  return it->second;
}

inline const nlohmann::json& qwen_cases() {
  return load_json("tokenizer/qwen-cases.json")["cases"];
}
inline const nlohmann::json& qwen_corpus() {
  return load_json("tokenizer/qwen-corpus.json");
}

// llama.cpp's test-tokenizer-0 format: cases in .inp separated by "\n__ggml_vocab_test__\n", one
// line of space-separated ids per case in .out.
struct LlamaCppCase {
  std::string text;
  std::vector<int32_t> ids;
};
inline std::vector<LlamaCppCase> llamacpp_cases() {
  std::string inp = read_file(data_path("tokenizer/llamacpp-qwen2.inp"));
  std::string out = read_file(data_path("tokenizer/llamacpp-qwen2.out"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<LlamaCppCase> cases;
  for (size_t pos = 0; pos < inp.size();) {
    size_t end = inp.find(sep, pos);
    if (end == std::string::npos) end = inp.size();
    cases.push_back({inp.substr(pos, end - pos), {}});
    pos = end + sep.size();
  }
  size_t line_start = 0;
  for (auto& c : cases) {
    size_t line_end = out.find('\n', line_start);
    if (line_end == std::string::npos) line_end = out.size();
    std::istringstream line(out.substr(line_start, line_end - line_start));
    for (int32_t id; line >> id;) c.ids.push_back(id);
    line_start = line_end + 1;
  }
  return cases;
}

}  // namespace fak::test
