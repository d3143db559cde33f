// libFuzzer target for the agent APIs' request bodies (/v1/messages, /v1/messages/count_tokens,
// /v1/responses): any bytes must parse or throw ApiError (a 400 naming the field), never another
// exception or a crash, and what parses must be what the chat template takes: messages with a
// string role and string content, tool calls with a name. The first byte picks the route (its
// value mod 3: messages, count_tokens, responses) and, by its bit 2, a model that thinks.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/anthropic_request.h"
#include "server/api_error.h"
#include "server/responses_request.h"

namespace {

void check_turn(const fak::server::ChatTurn& t) {
  if (!t.messages.is_array()) __builtin_trap();
  for (const auto& m : t.messages) {
    if (!m.is_object() || !m["role"].is_string() || !m["content"].is_string()) __builtin_trap();
    if (m.contains("tool_calls"))
      for (const auto& c : m["tool_calls"])
        if (!c["function"]["name"].is_string()) __builtin_trap();
  }
  if (!t.tools.is_null() && (!t.tools.is_array() || t.tools.empty())) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int route = data[0] % 3;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    if (route == 2)
      check_turn(fak::server::parse_responses_request(body, {}, data[0] & 4).turn);
    else
      check_turn(fak::server::parse_messages_request(body, {}, data[0] & 4, route == 1).turn);
  } catch (const fak::server::ApiError&) {
  }
  return 0;
}
