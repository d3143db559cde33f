// OpenAI response bodies: errors, completion and chat objects, streaming chunks and the SSE framing
// around them. Key order follows OpenAI's (ordered_json), which some clients' tests compare.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace fak::server {

using ojson = nlohmann::ordered_json;

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
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

// Non-streaming responses. content null = a reply made only of tool calls.
ojson completion_response(const ResponseMeta& m, const std::string& text,
                          const std::string& finish_reason, const Usage& u);
ojson chat_response(const ResponseMeta& m, const std::optional<std::string>& content,
                    const ojson& tool_calls, const std::string& finish_reason, const Usage& u);

// Streaming chunks. finish_reason empty = still going (null in JSON).
ojson completion_chunk(const ResponseMeta& m, const std::string& text,
                       const std::string& finish_reason);
ojson chat_chunk(const ResponseMeta& m, const ojson& delta, const std::string& finish_reason);
// The final usage-only chunk (stream_options.include_usage): empty choices.
ojson usage_chunk(const ResponseMeta& m, const Usage& u);

// JSON text; invalid UTF-8 (never expected: output goes through StreamDecoder) becomes U+FFFD.
std::string dump(const ojson& j);
// One server-sent event: "data: <json>\n\n".
std::string sse(const ojson& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

}  // namespace fak::server
