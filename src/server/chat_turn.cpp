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

chat::Turn build_turn(ServerContext& ctx, const ChatTurn& request,
                      const std::atomic<bool>* cancel) {
  if (!ctx.model->tokenizer() || !ctx.chat)
    bad_request("the model has no tokenizer: chat needs one");
  RenderBounds bounds;
  bounds.max_output_bytes = ctx.chat->max_prompt_bytes(ctx.scheduler->ctx());
  bounds.cancel = cancel;
  try {
    return chat::make_turn(*ctx.chat, request, bounds);
  } catch (const chat::TurnError& e) {
    bad_request(e.what(), e.param);
  }
}

GenerationSpec turn_generation_spec(ServerContext& ctx, const ChatTurn& request, chat::Turn turn,
                                    const std::string& api_key) {
  GenerationSpec spec;
  spec.partition = cache_partition(api_key, "");
  spec.tenant = tenant_hash(api_key);
  spec.prompt = std::move(turn.prompt);
  set_output_budget(spec, ctx.options, request.max_tokens, ctx.scheduler->ctx());
  spec.rules = std::move(turn.rules);
  spec.format = turn.format;
  spec.reply = std::move(turn.reply);
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
