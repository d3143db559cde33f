// Chat templates: turns an OpenAI-style conversation into the prompt text a model was trained on,
// by rendering the model's Jinja `chat_template` exactly as HF transformers does
// (apply_chat_template: trim_blocks, lstrip_blocks, transformers' tojson, raise_exception,
// strftime_now, loop controls). Parse once, render many times; immutable and thread-safe to share.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/json.h"

namespace fak {

namespace jinja {
struct Program;
}

// One render's budget (jinja_eval.h says how each is counted). A template comes with a model
// download and runs on every chat request, so none of these may be unbounded.
struct ChatTemplateLimits {
  size_t max_output_bytes = size_t(16) << 20;     // the rendered prompt
  size_t max_value_bytes = size_t(16) << 20;      // any one string or list
  uint64_t max_work_bytes = uint64_t(256) << 20;  // every string and list the render creates
  uint64_t max_steps = 20'000'000;                // statements + loop iterations + calls
  int max_call_depth = 64;                        // nested macro calls
  int max_depth = 1000;                           // expressions, statements and calls nested
  std::chrono::milliseconds max_time{5000};       // wall clock
};

// What one render call adds to the template's limits: a smaller output bound (what the model's
// context could hold, so an over-long prompt is refused before it is tokenized) and a flag that
// stops the render (the client left).
struct RenderBounds {
  size_t max_output_bytes = 0;  // 0: the template's own limit
  const std::atomic<bool>* cancel = nullptr;
  std::optional<std::tm> now;  // strftime_now's local time (tests pin it); unset: the clock's
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
                     bool add_generation_prompt, const fak::ojson& extra = fak::ojson::object(),
                     const RenderBounds& bounds = {}) const;

  void set_limits(const ChatTemplateLimits& limits) { limits_ = limits; }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::shared_ptr<const jinja::Program> program_;
  ChatTemplateLimits limits_;
};

}  // namespace fak
