// OpenAI Responses bodies: the response object, its output items (reasoning, message,
// function_call) built from a reply's blocks, usage, and the named, numbered stream events.
// Shapes follow the openai SDK's own types (resources/responses/responses.d.ts).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "server/generation.h"
#include "server/reply_blocks.h"

namespace fak::server {

// The model's name of a namespaced function -> (namespace, name) as the client knows it.
using ToolNamespaces = std::map<std::string, std::pair<std::string, std::string>>;

// What every event of one response repeats.
struct ResponseHead {
  std::string id;  // "resp_..."
  std::string model;
  int64_t created_at = 0;
  ojson echo;  // the request's settings (ResponsesRequest::echo)
  ToolNamespaces namespaced;
};

ResponseHead new_response_head(const std::string& model, ojson echo);

// The id prefix of an output item of this kind: rs_, msg_, fc_.
const char* item_id_prefix(ReplyBlock::Kind kind);
// An output item; start: as output_item.added announces it (no text yet). status:
// in_progress, completed or incomplete.
ojson output_item(const ReplyBlock& b, const std::string& id, const std::string& status,
                  bool start = false, const ToolNamespaces& namespaced = ToolNamespaces());
// A function call's name as the client knows it, and its namespace ("" for none).
std::pair<std::string, std::string> client_tool_name(const std::string& model_name,
                                                     const ToolNamespaces& namespaced);
// The content part of a reasoning or message item (reasoning_text / output_text).
ojson content_part(const ReplyBlock& b, bool start = false);

ojson responses_usage(const Usage& u, int reasoning_tokens);

// The response object. status: in_progress, completed, incomplete or failed. usage null while
// in progress. incomplete: the reason (max_output_tokens) when status is incomplete. error: null
// or {code, message} when failed.
ojson response_object(const ResponseHead& h, const std::string& status, const ojson& output,
                      const ojson& usage, const std::string& incomplete = "",
                      const ojson& error = nullptr);

}  // namespace fak::server
