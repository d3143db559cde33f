// Fuzzes the JSON-schema compiler and the byte machine, differentially: the input is a schema and
// a candidate text separated by a NUL byte. Compiling may only throw fak::Error; and when the
// grammar accepts the candidate, the candidate must parse as JSON and pass the separately written
// validator (schema_validate.h), or the fuzzer aborts. Schemas with oneOf are exempt from that
// check (the grammar reads oneOf as anyOf, so overlapping alternatives are allowed to disagree).
//   CXX=clang++ CXXFLAGS="-fsanitize=fuzzer-no-link,address" cmake -S . -B build-fuzz (continued)
//     -DFAK_FUZZ=ON -DFAK_BUILD_TESTS=OFF && cmake --build build-fuzz --target json_schema_fuzz
//   cp -r fuzz/corpus/json_schema /tmp/js && build-fuzz/json_schema_fuzz -max_total_time=60 /tmp/js
// It needs only src/grammar and src/tokenizer, so this is much quicker than the whole library:
//   clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address -Isrc fuzz/json_schema_fuzz.cpp (continued)
//     src/grammar/*.cpp src/tokenizer/*.cpp $(pkg-config --cflags --libs libpcre2-8 libutf8proc)
//     (continued) -o /tmp/json_schema_fuzz
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/json.h"
#include "grammar/grammar.h"
#include "grammar/schema_validate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const std::string schema_text = input.substr(0, split);
  const std::string candidate = split == std::string::npos ? "" : input.substr(split + 1);
  fak::ojson schema;
  try {
    schema = fak::ojson::parse(schema_text);
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  std::shared_ptr<const fak::grammar::Grammar> grammar;
  try {
    fak::grammar::SchemaOptions options;
    options.ignore_unsupported_keywords = size % 2 == 0;
    grammar = fak::grammar::compile_json_schema(schema, options);
  } catch (const fak::Error&) {
    return 0;  // refused schemas are expected
  }
  fak::grammar::GrammarMatcher matcher(grammar, nullptr, {});
  for (char c : candidate)
    if (!matcher.advance_bytes(std::string_view(&c, 1))) break;
  matcher.is_complete();
  matcher.can_continue();
  if (!fak::grammar::grammar_matches(*grammar, candidate)) return 0;
  if (size % 2 == 0 || schema_text.find("oneOf") != std::string::npos) return 0;  // see above
  fak::ojson value;
  try {
    value = fak::ojson::parse(candidate);
  } catch (const nlohmann::json::exception& e) {
    std::fprintf(stderr, "accepted but not JSON (%s): %s\n", e.what(), candidate.c_str());
    std::abort();
  }
  const std::string violation = fak::grammar::schema_violation(value, schema, {.strict = true});
  if (!violation.empty()) {
    std::fprintf(stderr, "accepted but invalid (%s): %s\n", violation.c_str(), candidate.c_str());
    std::abort();
  }
  return 0;
}
