#include "server/prompt_builder.h"

#include "chat/reasoning.h"
#include "server/api_error.h"
#include "server/context.h"
#include "tokenizer/tokenizer.h"

namespace fak::server {

BuiltPrompt build_chat_prompt(ServerContext& ctx, const ojson& messages, const ojson& tools,
                              const ojson& template_kwargs, ContentTokens content,
                              const std::atomic<bool>* cancel) {
  const Tokenizer* tok = ctx.model->tokenizer();
  if (!tok || !ctx.chat) bad_request("the model has no tokenizer: chat needs one");
  RenderBounds bounds;
  bounds.max_output_bytes = ctx.chat->max_prompt_bytes(ctx.scheduler->ctx());
  bounds.cancel = cancel;
  const std::string text =
      ctx.chat->render(messages, tools, true, template_kwargs, content, bounds);
  BuiltPrompt b;
  b.ids = ctx.chat->encode(text, content);
  const size_t end = text.find_last_not_of(" \t\r\n");
  const std::string_view trimmed =
      end == std::string::npos ? std::string_view() : std::string_view(text).substr(0, end + 1);
  b.opens_reasoning = trimmed.ends_with(chat::kThinkOpen);
  b.closes_reasoning = trimmed.ends_with(chat::kThinkClose);
  return b;
}

BuiltPrompt build_prompt(ServerContext& ctx, const CompletionRequest& r,
                         const std::atomic<bool>* cancel) {
  const Tokenizer* tok = ctx.model->tokenizer();
  if (r.prompt_ids) {
    for (int32_t id : *r.prompt_ids)
      if (id >= ctx.model->config().vocab)
        bad_request("token id " + std::to_string(id) + " is outside the vocabulary of " +
                        std::to_string(ctx.model->config().vocab),
                    "prompt");
    return {*r.prompt_ids};
  }
  if (!tok) bad_request("the model has no tokenizer: send the prompt as token ids", "prompt");
  // A raw prompt is the client's own text: its added tokens are tokens, as they always were.
  if (!r.chat) return {tok->encode(r.prompt)};
  // Tools stay in the prompt even for tool_choice "none": the prompt of an agent's next turn must
  // start with this one's for the prefix cache to serve it.
  return build_chat_prompt(ctx, r.messages, r.tools, r.chat_template_kwargs, r.content_tokens,
                           cancel);
}

std::optional<ThinkBlock> think_block(const ServerContext& ctx, const BuiltPrompt& prompt) {
  if (!ctx.chat || !ctx.chat->think_open_id() || !ctx.chat->think_close_id() ||
      prompt.closes_reasoning)
    return std::nullopt;
  return ThinkBlock{*ctx.chat->think_open_id(), *ctx.chat->think_close_id(),
                    prompt.opens_reasoning};
}

void check_prompt_fits(const std::vector<int32_t>& ids, int n_ctx, const std::string& param) {
  if (ids.empty()) bad_request("the prompt is empty", param);
  if (int(ids.size()) < n_ctx) return;
  const std::string what = param == "prompt" ? "prompt" : "messages";
  throw ApiError(400,
                 "This model's maximum context length is " + std::to_string(n_ctx) +
                     " tokens. However, your " + what + " resulted in " +
                     std::to_string(ids.size()) + " tokens, and at least one must be left to " +
                     "generate. Please reduce the length of the " + what + ".",
                 param, "context_length_exceeded");
}

}  // namespace fak::server
