// One assistant turn: what a caller asks for (TurnRequest: the conversation, tools and tool
// choice, an output format, reasoning options, stop strings, sampling) made into what runs it
// (Turn: the prompt ids, the rules every token is chosen by, and how the reply is read back). The
// server's four APIs (after translating into OpenAI chat's vocabulary) and `fak chat` make their
// turns here, so they prompt, constrain and read a model alike:
//
// - tools always stay in the prompt (an agent's next prompt then starts with this one's);
// - tool_choice "required" or a named function: a grammar of the model's own call syntax
//   (ChatFormat::forced_calls), after a header the format writes into the prompt (harmony);
// - a JSON output format: its grammar; a thinking model may reason first (one free block);
// - a thinking model's reply is split into reasoning and answer, and its reasoning budget counted.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "chat/chat_prompt.h"
#include "chat/reply_reader.h"
#include "core/json.h"
#include "runtime/sampler.h"
#include "runtime/sequence_decoder.h"

namespace fak::chat {

struct TurnRequest {
  ojson messages = ojson::array();   // normalised OpenAI chat messages
  ojson tools;                       // null or a non-empty array of OpenAI chat tools
  std::string tool_choice = "auto";  // "none", "auto", "required" or "function"
  std::string tool_choice_name;      // "function": the tool that must be called
  int max_tool_calls = 1;            // "required": how many calls the grammar allows
  // Off: schema keywords the grammar cannot enforce are skipped rather than refused (tools that
  // were never written for constrained decoding, e.g. Anthropic's without `strict`).
  bool strict_tool_schemas = true;
  ojson response_format;  // null or an OpenAI json_object / json_schema response_format
  std::string response_format_param = "response_format";  // the field a bad format is blamed on
  ojson template_kwargs;                                  // null or an object (enable_thinking)
  // special_tokens_in_content: true (chat_prompt.h); the prefill below is content too.
  ContentTokens content_tokens = ContentTokens::Text;
  // Text the reply continues (an Anthropic conversation that ends with an assistant message): it
  // follows the generation prompt, and the reply holds only what comes after it.
  std::string prefill;
  std::optional<int> max_tokens;
  std::optional<int> reasoning_budget;  // most reasoning tokens (thinking.budget_tokens)
  SamplingOptions sampling;
  std::vector<std::string> stop;
};

struct Turn {
  std::vector<int32_t> prompt;  // the rendered conversation (+ prefill, + a forced header)
  DecodeRules rules;            // how each token is chosen (runtime/sequence_decoder.h)
  const ChatFormat* format = nullptr;
  ReplyOptions reply;  // how the reply is read (format->reply_reader)
};

// A request the turn cannot be made from (a tool schema or output format the grammar cannot take,
// a forced choice without tools): param names the request field to blame.
class TurnError : public Error {
 public:
  TurnError(const std::string& message, std::string param)
      : Error(message), param(std::move(param)) {}
  std::string param;
};

// Throws TurnError as above, and fak::Error when the template fails to render (bounds: its
// output bound and cancel flag).
Turn make_turn(const ChatPrompt& chat, const TurnRequest& request, const RenderBounds& bounds = {});

}  // namespace fak::chat
