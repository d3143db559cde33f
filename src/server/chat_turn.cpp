#include "server/chat_turn.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>

#include "core/error.h"
#include "grammar/grammar.h"
#include "server/api_error.h"
#include "server/context.h"
#include "tokenizer/tokenizer.h"

namespace fak::server {

namespace {

// The same constraint rules as grammar_for in openai_routes.cpp, over a ChatTurn.
std::shared_ptr<const grammar::Grammar> turn_grammar(const ChatTurn& t,
                                                     const chat::ChatFormat& format) {
  const bool forced_tool = t.tool_choice == "required" || t.tool_choice == "function";
  if (forced_tool && !t.response_format.is_null())
    bad_request("a JSON output format and a forced tool choice cannot be combined",
                t.response_format_param);
  try {
    if (!t.response_format.is_null()) return grammar::compile_response_format(t.response_format);
    if (forced_tool) {
      if (!t.tools.is_array() || t.tools.empty())
        bad_request("a forced tool choice needs `tools`", "tool_choice");
      grammar::ToolCallOptions o;
      o.only_function = t.tool_choice_name;
      o.max_calls = t.tool_choice == "required" ? std::max(1, t.max_tool_calls) : 1;
      o.schema.ignore_unsupported_keywords = !t.strict_tool_schemas;
      return format.forced_calls(t.tools, o);
    }
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    bad_request(e.what(), t.response_format.is_null() ? "tools" : t.response_format_param);
  }
  return nullptr;
}

// The text a forced call starts the reply with, in formats whose call header opens with special
// tokens (ChatFormat::forced_call_prefix); empty otherwise.
std::string forced_prefix(const ServerContext& ctx, const ChatTurn& t) {
  if ((t.tool_choice != "function" && t.tool_choice != "required") || !ctx.chat) return "";
  return ctx.chat->format().forced_call_prefix();
}

}  // namespace

BuiltPrompt build_turn_prompt(ServerContext& ctx, const ChatTurn& turn,
                              const std::atomic<bool>* cancel) {
  BuiltPrompt built = build_chat_prompt(ctx, turn.messages, turn.tools, turn.template_kwargs,
                                        turn.content_tokens, cancel);
  if (!turn.prefill.empty()) {
    const Tokenizer& tok = *ctx.model->tokenizer();
    const std::vector<int32_t> more = turn.content_tokens == ContentTokens::Text
                                          ? tok.encode_literal(turn.prefill)
                                          : tok.encode(turn.prefill);
    built.ids.insert(built.ids.end(), more.begin(), more.end());
    // The reply continues the given answer text: nothing of it is reasoning, and a constraint
    // applies from its first token.
    built.opens_reasoning = false;
    built.closes_reasoning = true;
  }
  // A forced call whose header opens with special tokens (harmony): the prompt ends inside it.
  if (const std::string head = forced_prefix(ctx, turn); !head.empty()) {
    const std::vector<int32_t> more = ctx.model->tokenizer()->encode(head);
    built.ids.insert(built.ids.end(), more.begin(), more.end());
  }
  return built;
}

GenerationSpec turn_generation_spec(ServerContext& ctx, const ChatTurn& turn,
                                    const BuiltPrompt& prompt, const std::string& api_key) {
  const int n_ctx = ctx.scheduler->ctx();
  GenerationSpec spec;
  spec.partition = cache_partition(api_key, "");
  spec.tenant = tenant_hash(api_key);
  spec.prompt = prompt.ids;
  set_output_budget(spec, ctx.options, turn.max_tokens, n_ctx);
  spec.sampling = turn.sampling;
  spec.stop = turn.stop;
  spec.stop_ids = ctx.chat->stop_ids();
  spec.grammar = turn_grammar(turn, ctx.chat->format());
  spec.capture_tool_calls =
      turn.tools.is_array() && !turn.tools.empty() && turn.tool_choice != "none";
  spec.format = &ctx.chat->format();
  spec.tools = turn.tools;
  spec.reply_header = forced_prefix(ctx, turn);
  spec.split_reasoning = ctx.chat->think_close_id().has_value();
  spec.reasoning_open = spec.split_reasoning && prompt.opens_reasoning;
  if (turn.reasoning_budget && ctx.chat->think_open_id() && ctx.chat->think_close_id())
    spec.reasoning_budget = ReasoningBudget{*turn.reasoning_budget, *ctx.chat->think_open_id(),
                                            *ctx.chat->think_close_id()};
  // Constrained from the first token, but for one optional reasoning block first (scheduler.h).
  if (spec.grammar) spec.think = think_block(ctx, prompt);
  return spec;
}

void merge_leading_system(ojson& messages) {
  size_t n = 0;
  while (n < messages.size() && messages[n]["role"] == "system") ++n;
  if (n < 2) return;
  std::string text;
  for (size_t i = 0; i < n; ++i) {
    const std::string part = messages[i]["content"].get<std::string>();
    if (part.empty()) continue;
    text += (text.empty() ? "" : "\n\n") + part;
  }
  ojson merged = ojson::array();
  merged.push_back({{"role", "system"}, {"content", text}});
  for (size_t i = n; i < messages.size(); ++i) merged.push_back(std::move(messages[i]));
  messages = std::move(merged);
}

}  // namespace fak::server
