// Chat templates: turns an OpenAI-style conversation into the prompt text a model was trained on,
// by rendering the model's Jinja `chat_template` exactly as HF transformers does
// (apply_chat_template: trim_blocks, lstrip_blocks, transformers' tojson, raise_exception,
// strftime_now, loop controls). Parse once, render many times; immutable and thread-safe to share.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/json.h"

namespace fak {

namespace jinja {
struct Program;
}

struct ChatTemplateLimits {
  size_t max_output_bytes = size_t(64) << 20;  // output and any intermediate string
  uint64_t max_steps = 20'000'000;             // statements + loop iterations + calls per render
  int max_call_depth = 64;                     // nested macro calls
};

class ChatTemplate {
 public:
  // Parses once; a template with a syntax error throws fak::Error naming line/column and the
  // problem.
  static ChatTemplate parse(const std::string& source);
  // Fallback for models without a template: plain ChatML (<|im_start|>role\n...<|im_end|>\n).
  static ChatTemplate chatml();

  // messages: OpenAI-style array of {role, content, optional tool_calls, tool_call_id, name,
  // reasoning_content}. tools: array of OpenAI tool objects, or null. extra: more variables
  // (bos_token, eos_token, enable_thinking, ...). Template errors and raise_exception() throw
  // fak::Error.
  // note: nlohmann::json sorts object keys, so tool schemas rendered with tojson come out in
  // alphabetical key order; pass ordered_json (the overload below) to keep the caller's order, as
  // Python dicts do.
  std::string render(const nlohmann::json& messages, const nlohmann::json& tools,
                     bool add_generation_prompt,
                     const nlohmann::json& extra = nlohmann::json::object()) const;
  std::string render(const fak::ojson& messages, const fak::ojson& tools,
                     bool add_generation_prompt,
                     const fak::ojson& extra = fak::ojson::object()) const;

  void set_limits(const ChatTemplateLimits& limits) { limits_ = limits; }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::shared_ptr<const jinja::Program> program_;
  ChatTemplateLimits limits_;
};

}  // namespace fak
