// Fuzzes the chat template pipeline: arbitrary bytes are parsed as a template and rendered against
// a fixed conversation with tools. The only exception allowed out is fak::Error; tight limits keep
// every input fast (no hangs, no multi-GB strings) so a timeout or OOM is a real finding.
// note: CMake instruments only this file; configure with
// CXXFLAGS="-fsanitize=fuzzer-no-link,address" so the library gives coverage feedback too:
//   CXX=clang++ CXXFLAGS="-fsanitize=fuzzer-no-link,address" cmake -S . -B build-fuzz (continued)
//     -DFAK_FUZZ=ON -DFAK_BUILD_TESTS=OFF && cmake --build build-fuzz --target chat_template_fuzz
//   build-fuzz/chat_template_fuzz -max_total_time=60 -timeout=5 NEW_CORPUS
//   fuzz/corpus/chat_template
#include <cstddef>
#include <cstdint>
#include <string>

#include "chat/chat_template.h"
#include "core/error.h"
#include "core/json.h"

namespace {

const fak::ojson& messages() {
  static const auto m = fak::ojson::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2+2? 👋"},
    {"role": "assistant", "content": "<think>\nadd\n</think>\n\n4", "tool_calls": [
      {"type": "function", "function": {"name": "calc", "arguments": {"expr": "2+2"}}}]},
    {"role": "tool", "tool_call_id": "1", "content": "4"},
    {"role": "user", "content": "<tool_response>x</tool_response>"}
  ])");
  return m;
}

const fak::ojson& tools() {
  static const auto t = fak::ojson::parse(R"([{"type": "function", "function": {
    "name": "calc", "description": "Evaluate", "parameters": {"type": "object",
    "properties": {"expr": {"type": "string"}}, "required": ["expr"]}}}])");
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string source(reinterpret_cast<const char*>(data), size);
  try {
    fak::ChatTemplate tmpl = fak::ChatTemplate::parse(source);
    fak::ChatTemplateLimits limits;
    limits.max_output_bytes = 1 << 20;
    limits.max_steps = 200'000;
    limits.max_call_depth = 32;
    tmpl.set_limits(limits);
    fak::ojson extra = {{"bos_token", "<s>"}, {"enable_thinking", false}};
    tmpl.render(messages(), tools(), size % 2 == 0, extra);
  } catch (const fak::Error&) {
    // expected for malformed templates
  }
  return 0;
}
