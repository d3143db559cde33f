// Prompt tokens for a completion request (/v1/completions: the client's text or ids) and the
// context check with OpenAI's wording. Chat turns are made by the chat layer (chat/turn.h,
// through server/chat_turn.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "server/openai_request.h"

namespace fak::server {

struct ServerContext;

// Throws ApiError 400 for ids outside the vocabulary or a model without a tokenizer.
std::vector<int32_t> completion_prompt(ServerContext& ctx, const CompletionRequest& r);

// 400 context_length_exceeded when the prompt leaves no room to generate; param names the field.
void check_prompt_fits(const std::vector<int32_t>& ids, int n_ctx, const std::string& param);

}  // namespace fak::server
