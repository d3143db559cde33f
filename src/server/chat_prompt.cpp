#include "server/chat_prompt.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/generate.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace fak::server {

ChatPrompt::ChatPrompt(const Model& model) {
  const Tokenizer* tok = model.tokenizer();
  check(tok != nullptr, model.path().string() + " has no tokenizer.json: chat needs one");
  const TokenizerSpec& spec = tok->spec();
  template_ =
      spec.chat_template.empty() ? ChatTemplate::chatml() : ChatTemplate::parse(spec.chat_template);
  // A template that never mentions tool_calls would silently drop them; such templates get the
  // tools and calls written into the messages instead (messages_for_plain_template).
  handles_tools_ = template_.source().find("tool_calls") != std::string::npos &&
                   template_.source().find("tools") != std::string::npos;
  extra_ = ojson::object();
  auto token_text = [&](std::optional<int32_t> id) { return id ? tok->decode({&*id, 1}) : ""; };
  extra_["bos_token"] = token_text(spec.bos_id);
  extra_["eos_token"] = token_text(spec.eos_id);
  stop_ids_ = model_stop_ids(model);
  for (const char* end : {"<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>", "<end_of_turn>"})
    if (auto id = tok->token_id(end); id && tok->is_special(*id)) stop_ids_.push_back(*id);
  think_open_ = tok->token_id("<think>");
  if (think_open_) think_close_ = tok->token_id("</think>");
  if (!think_close_) think_open_.reset();
  std::sort(stop_ids_.begin(), stop_ids_.end());
  stop_ids_.erase(std::unique(stop_ids_.begin(), stop_ids_.end()), stop_ids_.end());
}

std::string ChatPrompt::render(const ojson& messages, const ojson& tools,
                               bool add_generation_prompt, const ojson& kwargs) const {
  ojson extra = extra_;
  if (kwargs.is_object())
    for (const auto& [k, v] : kwargs.items()) extra[k] = v;
  if (handles_tools_) return template_.render(messages, tools, add_generation_prompt, extra);
  return template_.render(messages_for_plain_template(messages, tools), ojson(),
                          add_generation_prompt, extra);
}

}  // namespace fak::server
