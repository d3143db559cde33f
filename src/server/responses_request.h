// OpenAI Responses request bodies (POST /v1/responses) parsed, validated and translated into a
// ChatTurn: `instructions` and the input items (messages, function_call, function_call_output,
// reasoning) become the chat messages the template takes, function tools move to the chat tools'
// shape, `text.format` becomes a response_format. fak keeps no responses on the server, so what
// needs a stored one (previous_response_id, conversation, item_reference, background) is refused
// with a 400 that says so, as are tool types fak does not run (web_search, file_search, ...).
#pragma once

#include <optional>
#include <string>

#include "server/chat_turn.h"

namespace fak::server {

struct ResponsesRequest {
  std::string model;
  ChatTurn turn;
  bool stream = false;
  // The request's settings as the response object repeats them: instructions, max_output_tokens,
  // parallel_tool_calls, reasoning, store, temperature, text, tool_choice, tools, top_p,
  // truncation, metadata (in that order).
  ojson echo = ojson::object();
};

ResponsesRequest parse_responses_request(const std::string& body, const SamplingOptions& defaults,
                                         bool model_thinks);

}  // namespace fak::server
