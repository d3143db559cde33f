// One assistant turn as the API front ends (OpenAI chat, Anthropic messages, OpenAI responses) ask
// for it, once each has translated its request into the vocabulary of /v1/chat/completions:
// made into a chat::Turn by the chat layer (chat/turn.h, the same rules `fak chat` follows) and
// into a GenerationSpec here, so every API prompts and constrains the model alike and an agent's
// prefix cache is shared across them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/turn.h"
#include "core/object_id.h"
#include "runtime/sampler.h"
#include "server/generation.h"
#include "server/prompt_builder.h"

namespace fak::server {

// The request's turn as the chat layer takes it (chat/turn.h).
using ChatTurn = chat::TurnRequest;

// The turn (chat/turn.h): prompt ids, decoding rules, reply options. Throws ApiError 400 when the
// template fails or the grammar cannot take a tool schema or output format (naming the field);
// cancel (the request's client_gone flag) stops the render when the client leaves.
chat::Turn build_turn(ServerContext& ctx, const ChatTurn& request,
                      const std::atomic<bool>* cancel = nullptr);

// The generation of a turn whose prompt fits the context. api_key: the request's (tenant_of): its
// prefix-cache partition and its share of the server.
GenerationSpec turn_generation_spec(ServerContext& ctx, const ChatTurn& request, chat::Turn turn,
                                    const std::string& api_key);

// Leading system messages merged into one: instructions plus developer messages (Codex), or a
// system prompt plus system messages, would otherwise be several system turns in a row, which
// many chat templates refuse.
void merge_leading_system(ojson& messages);

}  // namespace fak::server
