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

ojson chat_logprobs(const std::vector<TokenLogprob>& lps,
                    const std::function<std::string(int32_t)>& token_text) {
  auto entry = [](const std::string& text, float logprob) {
    ojson e;
    e["token"] = text;  // invalid UTF-8 (part of a character) is replaced when dumped
    e["logprob"] = logprob;
    ojson bytes = ojson::array();
    for (unsigned char c : text) bytes.push_back(int(c));
    e["bytes"] = bytes;
    return e;
  };
  ojson content = ojson::array();
  for (const TokenLogprob& lp : lps) {
    ojson e = entry(lp.text, lp.logprob);
    ojson top = ojson::array();
    for (const auto& [id, logprob] : lp.top) top.push_back(entry(token_text(id), logprob));
    e["top_logprobs"] = top;
    content.push_back(std::move(e));
  }
  return {{"content", content}};
}

ojson completion_logprobs(const std::vector<TokenLogprob>& lps,
                          const std::function<std::string(int32_t)>& token_text) {
  ojson tokens = ojson::array(), values = ojson::array(), tops = ojson::array(),
        offsets = ojson::array();
  size_t offset = 0;
  for (const TokenLogprob& lp : lps) {
    tokens.push_back(lp.text);
    values.push_back(lp.logprob);
    ojson top = ojson::object();
    for (const auto& [id, logprob] : lp.top) top[token_text(id)] = logprob;
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += lp.text.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", values},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

ojson completion_choice(int index, const std::string& text, const std::string& finish_reason,
                        const ojson& logprobs) {
  ojson choice;
  choice["index"] = index;
  choice["text"] = text;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_reason;
  return choice;
}

ojson chat_choice(int index, const ojson& message, const std::string& finish_reason,
                  const ojson& logprobs) {
  ojson choice;
  choice["index"] = index;
  choice["message"] = message;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_reason;
  return choice;
}

ojson completion_response(const ResponseMeta& m, const ojson& choices, const Usage& u) {
  ojson j = head(m, "text_completion");
  j["choices"] = choices;
  j["usage"] = usage_json(u);
  return j;
}

ojson chat_response(const ResponseMeta& m, const ojson& choices, const Usage& u) {
  ojson j = head(m, "chat.completion");
  j["choices"] = choices;
  j["usage"] = usage_json(u);
  return j;
}

ojson completion_chunk(const ResponseMeta& m, const std::string& text,
                       const std::string& finish_reason, int index, const ojson& logprobs) {
  ojson j = head(m, "text_completion");
  ojson choice;
  choice["index"] = index;
  choice["text"] = text;
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = reason(finish_reason);
  j["choices"] = ojson::array({choice});
  return j;
}

ojson chat_chunk(const ResponseMeta& m, const ojson& delta, const std::string& finish_reason,
                 int index, const ojson& logprobs) {
  ojson j = head(m, "chat.completion.chunk");
  ojson choice;
  choice["index"] = index;
  choice["delta"] = delta;
  choice["logprobs"] = logprobs;
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
