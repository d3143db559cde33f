// OpenAI response bodies: errors, completion and chat objects, streaming chunks and the SSE framing
// around them. Key order follows OpenAI's (ordered_json), which some clients' tests compare.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"

namespace fak::server {

using ojson = fak::ojson;

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
};

struct TokenLogprob {
  int32_t id = 0;
  std::string text;  // the token's bytes (may be part of a UTF-8 character)
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // alternatives, most likely first
};

// What one response is about: the same id and created time go into every chunk of a stream.
struct ResponseMeta {
  std::string id;
  std::string model;
  int64_t created = 0;
  bool chat = false;
};

ResponseMeta new_response_meta(const std::string& model, bool chat);

ojson error_body(const std::string& message, const std::string& type, const std::string& param,
                 const std::string& code);
ojson usage_json(const Usage& u);

// Logprobs as each API spells them (token_text: the id's text, for the alternatives).
// Chat: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
ojson chat_logprobs(const std::vector<TokenLogprob>& lps,
                    const std::function<std::string(int32_t)>& token_text);
// Completions: {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}.
ojson completion_logprobs(const std::vector<TokenLogprob>& lps,
                          const std::function<std::string(int32_t)>& token_text);

// One choice of a whole reply. message: {role, content, [reasoning_content], [tool_calls]}.
ojson completion_choice(int index, const std::string& text, const std::string& finish_reason,
                        const ojson& logprobs);
ojson chat_choice(int index, const ojson& message, const std::string& finish_reason,
                  const ojson& logprobs);
ojson completion_response(const ResponseMeta& m, const ojson& choices, const Usage& u);
ojson chat_response(const ResponseMeta& m, const ojson& choices, const Usage& u);

// Streaming chunks. finish_reason empty = still going (null in JSON).
ojson completion_chunk(const ResponseMeta& m, const std::string& text,
                       const std::string& finish_reason, int index = 0,
                       const ojson& logprobs = nullptr);
ojson chat_chunk(const ResponseMeta& m, const ojson& delta, const std::string& finish_reason,
                 int index = 0, const ojson& logprobs = nullptr);
// The final usage-only chunk (stream_options.include_usage): empty choices.
ojson usage_chunk(const ResponseMeta& m, const Usage& u);

// JSON text; invalid UTF-8 (never expected: output goes through StreamDecoder) becomes U+FFFD.
std::string dump(const ojson& j);
// One server-sent event: "data: <json>\n\n".
std::string sse(const ojson& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

}  // namespace fak::server
