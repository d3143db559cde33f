// One assistant turn as the newer API front ends (Anthropic messages, OpenAI responses) ask for
// it, once each has translated its request into the vocabulary of /v1/chat/completions:
// normalised messages, tools in OpenAI's shape, a tool choice and an output format. Turned here
// into prompt tokens and a GenerationSpec by the same rules as the chat route (tools always in the
// prompt, a grammar for a forced tool call or a JSON format, reasoning split for thinking models),
// so every API prompts and constrains the model alike and an agent's prefix cache is shared
// across them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/object_id.h"
#include "runtime/sampler.h"
#include "server/generation.h"
#include "server/prompt_builder.h"

namespace fak::server {

struct ChatTurn {
  ojson messages = ojson::array();   // normalised as openai_request.cpp does for the template
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

// The rendered prompt (plus the prefill). Throws ApiError 400 when the template fails; cancel
// (the request's client_gone flag) stops the render when the client leaves.
BuiltPrompt build_turn_prompt(ServerContext& ctx, const ChatTurn& turn,
                              const std::atomic<bool>* cancel = nullptr);

// The generation for a prompt from build_turn_prompt that fits the context. api_key: the
// request's (tenant_of): its prefix-cache partition and its share of the server. Throws ApiError
// 400 for a schema the grammar cannot take.
GenerationSpec turn_generation_spec(ServerContext& ctx, const ChatTurn& turn,
                                    const BuiltPrompt& prompt, const std::string& api_key);

// Leading system messages merged into one: instructions plus developer messages (Codex), or a
// system prompt plus system messages, would otherwise be several system turns in a row, which
// many chat templates refuse.
void merge_leading_system(ojson& messages);

}  // namespace fak::server
