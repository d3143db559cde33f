#include "chat/turn.h"

#include "chat/reasoning.h"
#include "core/error.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

namespace fak::chat {

namespace {

bool forced_tool(const TurnRequest& t) {
  return t.tool_choice == "required" || t.tool_choice == "function";
}

// The grammar of a forced tool call or a JSON output format (null: unconstrained).
std::shared_ptr<const grammar::Grammar> turn_grammar(const TurnRequest& t,
                                                     const ChatFormat& format) {
  if (forced_tool(t) && !t.response_format.is_null())
    throw TurnError("a JSON output format and a forced tool choice cannot be combined",
                    t.response_format_param);
  try {
    if (!t.response_format.is_null()) return grammar::compile_response_format(t.response_format);
    if (forced_tool(t)) {
      if (!t.tools.is_array() || t.tools.empty())
        throw TurnError("a forced tool choice needs `tools`", "tool_choice");
      grammar::ToolCallOptions o;
      o.only_function = t.tool_choice_name;
      o.max_calls = t.tool_choice == "required" ? std::max(1, t.max_tool_calls) : 1;
      o.schema.ignore_unsupported_keywords = !t.strict_tool_schemas;
      return format.forced_calls(t.tools, o);
    }
  } catch (const TurnError&) {
    throw;
  } catch (const Error& e) {
    throw TurnError(e.what(), t.response_format.is_null() ? "tools" : t.response_format_param);
  }
  return nullptr;
}

}  // namespace

Turn make_turn(const ChatPrompt& chat, const TurnRequest& t, const RenderBounds& bounds) {
  Turn turn;
  turn.format = &chat.format();
  const Tokenizer& tok = chat.tokenizer();
  const std::string text =
      chat.render(t.messages, t.tools, true, t.template_kwargs, t.content_tokens, bounds);
  turn.prompt = chat.encode(text, t.content_tokens);
  const size_t end = text.find_last_not_of(" \t\r\n");
  const std::string_view trimmed =
      end == std::string::npos ? std::string_view() : std::string_view(text).substr(0, end + 1);
  bool opens_reasoning = trimmed.ends_with(kThinkOpen);
  bool closes_reasoning = trimmed.ends_with(kThinkClose);
  if (!t.prefill.empty()) {
    const std::vector<int32_t> more = t.content_tokens == ContentTokens::Text
                                          ? tok.encode_literal(t.prefill)
                                          : tok.encode(t.prefill);
    turn.prompt.insert(turn.prompt.end(), more.begin(), more.end());
    // The reply continues the given answer text: nothing of it is reasoning, and a constraint
    // applies from its first token.
    opens_reasoning = false;
    closes_reasoning = true;
  }
  // A forced call whose header opens with special tokens (harmony): the prompt ends inside it.
  if (forced_tool(t)) {
    turn.reply.header = chat.format().forced_call_prefix();
    const std::vector<int32_t> more = tok.encode(turn.reply.header);
    turn.prompt.insert(turn.prompt.end(), more.begin(), more.end());
  }

  turn.rules.sampling = t.sampling;
  turn.rules.stop_ids = chat.stop_ids();
  turn.rules.grammar = turn_grammar(t, chat.format());
  turn.reply.stop = t.stop;
  turn.reply.capture_tool_calls = t.tools.is_array() && !t.tools.empty() && t.tool_choice != "none";
  turn.reply.tools = t.tools;
  turn.reply.split_reasoning = chat.think_close_id().has_value();
  turn.reply.reasoning_open = turn.reply.split_reasoning && opens_reasoning;
  turn.rules.reasoning_open = turn.reply.reasoning_open;
  const auto open = chat.think_open_id(), close = chat.think_close_id();
  if (t.reasoning_budget && open && close)
    turn.rules.reasoning_budget = ReasoningBudget{*t.reasoning_budget, *open, *close};
  // Constrained from the first token, but for one optional reasoning block first.
  if (turn.rules.grammar && open && close && !closes_reasoning)
    turn.rules.think = ThinkBlock{*open, *close, opens_reasoning};
  return turn;
}

}  // namespace fak::chat
