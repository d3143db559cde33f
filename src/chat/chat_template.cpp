// ChatTemplate: the public face of the Jinja renderer; builds the variables transformers passes
// to a chat template and runs the interpreter.
#include "chat/chat_template.h"

#include <algorithm>

#include "chat/jinja_eval.h"
#include "chat/jinja_parser.h"
#include "core/error.h"
#include "core/json.h"

namespace fak {

namespace {

// The pycoder-6m / Qwen ChatML template, used when a model ships none.
constexpr const char* kChatml =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' "
    "}}{% endif %}";

}  // namespace

ChatTemplate ChatTemplate::parse(const std::string& source) {
  ChatTemplate t;
  t.source_ = source;
  t.program_ = std::make_shared<const jinja::Program>(jinja::parse_template(source));
  return t;
}

ChatTemplate ChatTemplate::chatml() {
  return parse(kChatml);
}

std::string ChatTemplate::render(const nlohmann::json& messages, const nlohmann::json& tools,
                                 bool add_generation_prompt, const nlohmann::json& extra) const {
  return render(fak::ojson(messages), fak::ojson(tools), add_generation_prompt, fak::ojson(extra));
}

std::string ChatTemplate::render(const fak::ojson& messages, const fak::ojson& tools,
                                 bool add_generation_prompt, const fak::ojson& extra,
                                 const RenderBounds& bounds) const {
  check(program_ != nullptr, "chat template: render() on a ChatTemplate that was never parsed");
  check(messages.is_array(), "chat template: messages must be a JSON array");
  check(tools.is_null() || tools.is_array(), "chat template: tools must be a JSON array or null");
  check(extra.is_object(), "chat template: extra variables must be a JSON object");
  jinja::Dict context;
  // Same variables as transformers' apply_chat_template; extras (special tokens, template kwargs)
  // come first so the fixed ones cannot be shadowed by accident.
  for (const auto& [k, v] : extra.items()) context.set(k, jinja::Value::from_json(v));
  context.set("messages", jinja::Value::from_json(messages));
  context.set("tools", jinja::Value::from_json(tools));
  context.set("add_generation_prompt", add_generation_prompt);
  if (!context.find("documents")) context.set("documents", nullptr);
  jinja::Limits limits;
  limits.max_output = limits_.max_output_bytes;
  if (bounds.max_output_bytes > 0)
    limits.max_output = std::min(limits.max_output, bounds.max_output_bytes);
  limits.max_value = limits_.max_value_bytes;
  limits.max_work = limits_.max_work_bytes;
  limits.max_steps = limits_.max_steps;
  limits.max_call_depth = limits_.max_call_depth;
  limits.max_depth = limits_.max_depth;
  limits.max_time = limits_.max_time;
  limits.cancel = bounds.cancel;
  limits.now = bounds.now;
  jinja::Interpreter interpreter(*program_, limits);
  return interpreter.render(context);
}

}  // namespace fak
