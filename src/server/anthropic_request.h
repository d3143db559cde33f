// Anthropic Messages request bodies (POST /v1/messages and /v1/messages/count_tokens) parsed,
// validated and translated into a ChatTurn: the system prompt and the content blocks become the
// OpenAI-style messages the chat template takes (tool_use blocks become assistant tool calls,
// tool_result blocks tool messages, thinking blocks reasoning), and the tools move from
// `input_schema` to OpenAI's `function.parameters`. Every mistake is a 400 naming the field,
// found before any work is queued; what fak cannot do (images, documents, server tools) is refused
// rather than ignored.
#pragma once

#include <string>

#include "server/chat_turn.h"

namespace fak::server {

struct MessagesRequest {
  std::string model;
  ChatTurn turn;
  bool stream = false;
};

// defaults: the sampling a request starts from (generation_config.json). model_thinks: the model
// has a <think> block, so `thinking` maps to the template's enable_thinking. count_tokens: the
// body of /v1/messages/count_tokens, which has no max_tokens.
MessagesRequest parse_messages_request(const std::string& body, const SamplingOptions& defaults,
                                       bool model_thinks, bool count_tokens = false);

}  // namespace fak::server
