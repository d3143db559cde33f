// Tool calls in model output, Qwen/Hermes style: `<tool_call>{"name": ..., "arguments": {...}}
// </tool_call>` blocks become OpenAI `tool_calls`; the text around them stays the content. Also the
// other direction for templates that know nothing of tools: the tool list as a system-prompt
// preamble, and earlier assistant tool calls / tool results written back as the same tags.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/json.h"

namespace fak::chat {

using ojson = fak::ojson;

inline constexpr std::string_view kToolCallOpen = "<tool_call>";
inline constexpr std::string_view kToolCallClose = "</tool_call>";

struct ExtractedToolCalls {
  std::string content;                // text outside the tool-call blocks, trimmed
  ojson tool_calls = ojson::array();  // OpenAI form: {id, type, function: {name, arguments}}
};

// One block's body (the JSON between the tags): an OpenAI tool call, with a fresh id, when it is
// a JSON object with a string `name` (arguments re-serialised as OpenAI's JSON string).
bool parse_tool_call_body(std::string_view body, ojson& call);

// Blocks whose body is not a JSON object with a string `name` are left in the content as they
// are. An unterminated last block (generation stopped inside it) is parsed if its JSON is whole.
ExtractedToolCalls extract_tool_calls(std::string_view text);

// For templates without tool support: messages rewritten so the conversation still carries the
// tools (a Hermes-style system preamble), the assistant's earlier calls and the tool results.
ojson messages_for_plain_template(const ojson& messages, const ojson& tools);

}  // namespace fak::chat
