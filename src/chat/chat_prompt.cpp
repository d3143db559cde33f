#include "chat/chat_prompt.h"

#include <algorithm>

#include "chat/tool_calls.h"
#include "core/error.h"
#include "runtime/generate.h"
#include "tokenizer/tokenizer.h"

namespace fak::chat {

namespace {

// Every string in v, keys included, with its added tokens broken by the tokenizer's marks.
ojson marked(const ojson& v, const Tokenizer& tok) {
  if (v.is_string()) return tok.mark_literal(v.get_ref<const std::string&>());
  if (v.is_array()) {
    ojson out = ojson::array();
    for (const ojson& e : v) out.push_back(marked(e, tok));
    return out;
  }
  if (v.is_object()) {
    ojson out = ojson::object();
    for (const auto& [k, e] : v.items()) out[tok.mark_literal(k)] = marked(e, tok);
    return out;
  }
  return v;
}

const Tokenizer& tokenizer_of(const Model& model) {
  check(model.tokenizer() != nullptr,
        model.path().string() + " has no tokenizer.json: chat needs one");
  return *model.tokenizer();
}

}  // namespace

ChatPrompt::ChatPrompt(const Model& model)
    : ChatPrompt(tokenizer_of(model), model_stop_ids(model)) {}

ChatPrompt::ChatPrompt(const Tokenizer& tokenizer, std::vector<int32_t> eos_ids)
    : tokenizer_(&tokenizer) {
  const Tokenizer* tok = &tokenizer;
  const TokenizerSpec& spec = tok->spec();
  has_model_template_ = !spec.chat_template.empty();
  reads_thinking_ = spec.chat_template.find(".thinking") != std::string::npos ||
                    spec.chat_template.find("['thinking']") != std::string::npos ||
                    spec.chat_template.find("[\"thinking\"]") != std::string::npos;
  template_ =
      spec.chat_template.empty() ? ChatTemplate::chatml() : ChatTemplate::parse(spec.chat_template);
  // A template that never mentions tool_calls would silently drop them; such templates get the
  // tools and calls written into the messages instead (messages_for_plain_template).
  handles_tools_ = template_.source().find("tool_calls") != std::string::npos &&
                   template_.source().find("tools") != std::string::npos;
  // A template without tools gets fak's Hermes preamble, and so Hermes calls.
  format_ = handles_tools_ ? &format_for_template(template_.source()) : &hermes_format();
  extra_ = ojson::object();
  auto token_text = [&](std::optional<int32_t> id) { return id ? tok->decode({&*id, 1}) : ""; };
  extra_["bos_token"] = token_text(spec.bos_id);
  extra_["eos_token"] = token_text(spec.eos_id);
  for (int32_t id = 0; id < tok->vocab_size(); ++id)
    max_token_bytes_ = std::max(max_token_bytes_, tok->token_bytes(id).size());
  stop_ids_ = std::move(eos_ids);
  for (std::string_view end : format_->end_of_turn())
    if (auto id = tok->token_id(end); id && tok->is_special(*id)) stop_ids_.push_back(*id);
  think_open_ = tok->token_id("<think>");
  if (think_open_) think_close_ = tok->token_id("</think>");
  if (!think_close_) think_open_.reset();
  std::sort(stop_ids_.begin(), stop_ids_.end());
  stop_ids_.erase(std::unique(stop_ids_.begin(), stop_ids_.end()), stop_ids_.end());
}

std::string ChatPrompt::render(const ojson& messages, const ojson& tools,
                               bool add_generation_prompt, const ojson& kwargs,
                               ContentTokens content, const RenderBounds& bounds) const {
  if (content == ContentTokens::Text) {
    // Marked before the template or the tool preamble below add their markup, so that markup
    // (and bos_token / eos_token) is all that stays intact.
    return render(marked(messages, *tokenizer_), marked(tools, *tokenizer_), add_generation_prompt,
                  marked(kwargs, *tokenizer_), ContentTokens::Special, bounds);
  }
  ojson extra = extra_;
  if (kwargs.is_object())
    for (const auto& [k, v] : kwargs.items()) extra[k] = v;
  // A turn's reasoning reaches the template under the name it reads: reasoning_content (Qwen3,
  // DeepSeek, GLM) or thinking (gpt-oss replays the analysis before each earlier tool call).
  bool unnamed = false;  // some turn's reasoning is not under "thinking" yet
  for (const ojson& m : messages)
    unnamed =
        unnamed || (m.is_object() && m.contains("reasoning_content") && !m.contains("thinking"));
  if (unnamed && reads_thinking_) {
    ojson copy = messages;
    for (ojson& m : copy)
      if (m.is_object() && m.contains("reasoning_content") && !m.contains("thinking"))
        m["thinking"] = m["reasoning_content"];
    return render(copy, tools, add_generation_prompt, kwargs, ContentTokens::Special, bounds);
  }
  if (handles_tools_)
    return template_.render(messages, tools, add_generation_prompt, extra, bounds);
  return template_.render(messages_for_plain_template(messages, tools), ojson(),
                          add_generation_prompt, extra, bounds);
}

size_t ChatPrompt::max_prompt_bytes(int n_ctx) const {
  size_t bytes = 0;
  if (n_ctx <= 0 || __builtin_mul_overflow(size_t(n_ctx), max_token_bytes_ * 4, &bytes))
    return SIZE_MAX;
  return bytes;
}

std::vector<int32_t> ChatPrompt::encode(std::string_view rendered, ContentTokens content) const {
  return content == ContentTokens::Text ? tokenizer_->encode_marked(rendered)
                                        : tokenizer_->encode(rendered);
}

std::string no_template_warning(const std::string& model) {
  return model +
         " has no chat template (no chat_template.jinja, chat_template.json or "
         "tokenizer_config.json "
         "chat_template; no tokenizer.chat_template in a GGUF): chat prompts use ChatML, which "
         "this "
         "model may not have been trained on";
}

}  // namespace fak::chat
