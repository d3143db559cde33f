// Prompt tokens for a request, as every API front end needs them: a completion's text or ids, or
// a conversation rendered with the model's chat template (tools always kept in it, so the prefix
// of an agent's conversation stays the same whatever tool_choice says), and the context check
// with OpenAI's wording.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_prompt.h"
#include "server/openai_request.h"
#include "server/scheduler.h"

namespace fak::server {

struct ServerContext;

struct BuiltPrompt {
  std::vector<int32_t> ids;
  // Chat prompts of thinking models: the generation prompt opened a <think> block (the reply
  // starts as reasoning), or closed one (thinking turned off: the reply is all answer).
  bool opens_reasoning = false;
  bool closes_reasoning = false;
};

// Throws ApiError 400 for ids outside the vocabulary, invalid UTF-8 or a model without tokenizer.
// cancel (the request's client_gone flag) stops a chat template's render when the client leaves.
BuiltPrompt build_prompt(ServerContext& ctx, const CompletionRequest& r,
                         const std::atomic<bool>* cancel = nullptr);
// Conversations from other APIs (Anthropic messages, OpenAI responses), already normalised to
// OpenAI chat messages. The render stops at what the context could hold (max_prompt_bytes).
BuiltPrompt build_chat_prompt(ServerContext& ctx, const ojson& messages, const ojson& tools,
                              const ojson& template_kwargs,
                              ContentTokens content = ContentTokens::Text,
                              const std::atomic<bool>* cancel = nullptr);

// A thinking model's constrained reply may open one reasoning block, or starts inside one the
// prompt opened; nullopt for other models and for a prompt that closed the block itself
// (thinking turned off: constrained from the first token, no block allowed).
std::optional<ThinkBlock> think_block(const ServerContext& ctx, const BuiltPrompt& prompt);

// 400 context_length_exceeded when the prompt leaves no room to generate; param names the field.
void check_prompt_fits(const std::vector<int32_t>& ids, int n_ctx, const std::string& param);

}  // namespace fak::server
