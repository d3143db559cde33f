#include "server/openai_format.h"

#include <atomic>
#include <chrono>
#include <cstdio>

namespace fak::server {

ResponseMeta new_response_meta(const std::string& model, bool chat) {
  static std::atomic<uint64_t> counter{0};
  ResponseMeta m;
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  m.created = std::chrono::duration_cast<std::chrono::seconds>(now).count();
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%llx%04llx", chat ? "chatcmpl" : "cmpl",
                (unsigned long long)m.created, (unsigned long long)(++counter & 0xffff));
  m.id = buf;
  m.model = model;
  m.chat = chat;
  return m;
}

ojson error_body(const std::string& message, const std::string& type, const std::string& param,
                 const std::string& code) {
  ojson e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? ojson() : ojson(param);
  e["code"] = code.empty() ? ojson() : ojson(code);
  return {{"error", e}};
}

ojson usage_json(const Usage& u) {
  ojson j;
  j["prompt_tokens"] = u.prompt_tokens;
  j["completion_tokens"] = u.completion_tokens;
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  j["prompt_tokens_details"] = {{"cached_tokens", u.cached_tokens}};
  return j;
}

namespace {

ojson head(const ResponseMeta& m, const char* object) {
  ojson j;
  j["id"] = m.id;
  j["object"] = object;
  j["created"] = m.created;
  j["model"] = m.model;
  return j;
}

ojson reason(const std::string& r) {
  return r.empty() ? ojson() : ojson(r);
}

}  // namespace

ojson completion_response(const ResponseMeta& m, const std::string& text,
                          const std::string& finish_reason, const Usage& u) {
  ojson j = head(m, "text_completion");
  ojson choice;
  choice["index"] = 0;
  choice["text"] = text;
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason;
  j["choices"] = ojson::array({choice});
  j["usage"] = usage_json(u);
  return j;
}

ojson chat_response(const ResponseMeta& m, const std::optional<std::string>& content,
                    const ojson& tool_calls, const std::string& finish_reason, const Usage& u) {
  ojson j = head(m, "chat.completion");
  ojson msg;
  msg["role"] = "assistant";
  msg["content"] = content ? ojson(*content) : ojson();
  if (tool_calls.is_array() && !tool_calls.empty()) msg["tool_calls"] = tool_calls;
  ojson choice;
  choice["index"] = 0;
  choice["message"] = msg;
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason;
  j["choices"] = ojson::array({choice});
  j["usage"] = usage_json(u);
  return j;
}

ojson completion_chunk(const ResponseMeta& m, const std::string& text,
                       const std::string& finish_reason) {
  ojson j = head(m, "text_completion");
  ojson choice;
  choice["index"] = 0;
  choice["text"] = text;
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = reason(finish_reason);
  j["choices"] = ojson::array({choice});
  return j;
}

ojson chat_chunk(const ResponseMeta& m, const ojson& delta, const std::string& finish_reason) {
  ojson j = head(m, "chat.completion.chunk");
  ojson choice;
  choice["index"] = 0;
  choice["delta"] = delta;
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = reason(finish_reason);
  j["choices"] = ojson::array({choice});
  return j;
}

ojson usage_chunk(const ResponseMeta& m, const Usage& u) {
  ojson j = head(m, m.chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = ojson::array();
  j["usage"] = usage_json(u);
  return j;
}

std::string dump(const ojson& j) {
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string sse(const ojson& j) {
  return "data: " + dump(j) + "\n\n";
}

}  // namespace fak::server
