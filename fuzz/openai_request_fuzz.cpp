// libFuzzer target for the server's request bodies (/v1/completions, /v1/chat/completions): any
// bytes must parse or throw ApiError (a 400 naming the field), never another exception or a crash.
// The first byte picks the route.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/api_error.h"
#include "server/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool chat = data[0] & 1;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const fak::server::CompletionRequest r = fak::server::parse_completion_request(body, chat);
    if (chat && !r.messages.is_array()) __builtin_trap();
  } catch (const fak::server::ApiError&) {
  }
  return 0;
}
