// OpenAI Responses request bodies (POST /v1/responses) parsed, validated and translated into a
// ChatTurn: `instructions` and the input items (messages, function_call, function_call_output,
// reasoning) become the chat messages the template takes, function tools move to the chat tools'
// shape, `text.format` becomes a response_format. fak keeps no responses on the server, so what
// needs a stored one (previous_response_id, conversation, item_reference, background) is refused
// with a 400 that says so.
//
// Tools: function tools, and namespace tools (a named group of function tools the client runs,
// as Codex sends its MCP tools): the model sees each as "<namespace>__<name>", and a call comes
// back as the Responses API defines a namespaced one (name and namespace apart). Hosted tools
// fak cannot run (web_search, file_search, code_interpreter, computer use, image generation,
// remote MCP, ...) are left out of the prompt with a warning instead of failing the turn, unless
// the server refuses them (--refuse-hosted-tools).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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
  // The model's name of each namespaced function -> (namespace, name) as the client knows it.
  std::map<std::string, std::pair<std::string, std::string>> namespaced;
  std::vector<std::string> warnings;  // what was left out, for the reply's Fak-Warning header
};

// "<namespace>__<name>": how the model sees a namespaced function.
std::string namespaced_tool_name(const std::string& ns, const std::string& name);

ResponsesRequest parse_responses_request(const std::string& body, const SamplingOptions& defaults,
                                         bool model_thinks, bool refuse_hosted_tools = false);

}  // namespace fak::server
