#include "server/responses_format.h"

#include <chrono>

#include "server/chat_turn.h"

namespace fak::server {

ResponseHead new_response_head(const std::string& model, ojson echo) {
  ResponseHead h;
  h.id = new_object_id("resp_");
  h.model = model;
  h.created_at = std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  h.echo = std::move(echo);
  return h;
}

const char* item_id_prefix(ReplyBlock::Kind kind) {
  switch (kind) {
    case ReplyBlock::Kind::Reasoning:
      return "rs_";
    case ReplyBlock::Kind::Text:
      return "msg_";
    case ReplyBlock::Kind::ToolCall:
      return "fc_";
  }
  return "item_";
}

ojson content_part(const ReplyBlock& b, bool start) {
  ojson part;
  if (b.kind == ReplyBlock::Kind::Reasoning) {
    part["type"] = "reasoning_text";
    part["text"] = start ? "" : b.text;
    return part;
  }
  part["type"] = "output_text";
  part["annotations"] = ojson::array();
  part["logprobs"] = ojson::array();
  part["text"] = start ? "" : b.text;
  return part;
}

ojson output_item(const ReplyBlock& b, const std::string& id, const std::string& status, bool start,
                  const ToolNamespaces& namespaced) {
  ojson item;
  item["id"] = id;
  switch (b.kind) {
    case ReplyBlock::Kind::Reasoning:
      // The model's own reasoning text, not a summary of it: the summary stays empty, as it
      // does for OpenAI's open-weight models.
      item["type"] = "reasoning";
      item["summary"] = ojson::array();
      item["content"] = start ? ojson::array() : ojson::array({content_part(b)});
      return item;
    case ReplyBlock::Kind::Text:
      item["type"] = "message";
      item["status"] = status;
      item["role"] = "assistant";
      item["content"] = start ? ojson::array() : ojson::array({content_part(b)});
      return item;
    case ReplyBlock::Kind::ToolCall:
      item["type"] = "function_call";
      item["status"] = status;
      item["arguments"] = start ? "" : b.text;
      item["call_id"] = b.call_id;
      {
        const auto [name, ns] = client_tool_name(b.name, namespaced);
        item["name"] = name;
        if (!ns.empty()) item["namespace"] = ns;
      }
      return item;
  }
  return item;
}

std::pair<std::string, std::string> client_tool_name(const std::string& model_name,
                                                     const ToolNamespaces& namespaced) {
  const auto it = namespaced.find(model_name);
  if (it == namespaced.end()) return {model_name, ""};
  return {it->second.second, it->second.first};
}

ojson responses_usage(const Usage& u, int reasoning_tokens) {
  ojson j;
  j["input_tokens"] = u.prompt_tokens;
  j["input_tokens_details"] = {{"cached_tokens", u.cached_tokens}};
  j["output_tokens"] = u.completion_tokens;
  j["output_tokens_details"] = {{"reasoning_tokens", reasoning_tokens}};
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  return j;
}

ojson response_object(const ResponseHead& h, const std::string& status, const ojson& output,
                      const ojson& usage, const std::string& incomplete, const ojson& error) {
  ojson j;
  j["id"] = h.id;
  j["object"] = "response";
  j["created_at"] = h.created_at;
  j["status"] = status;
  j["error"] = error;
  j["incomplete_details"] = incomplete.empty() ? ojson() : ojson{{"reason", incomplete}};
  ojson echo = h.echo;
  auto take = [&](const char* key) {
    j[key] = echo.contains(key) ? echo[key] : ojson();
    echo.erase(key);
  };
  take("instructions");
  take("max_output_tokens");
  j["model"] = h.model;
  j["output"] = output;
  for (auto& [k, v] : echo.items()) j[k] = v;  // parallel_tool_calls ... metadata, in order
  j["usage"] = usage;
  return j;
}

}  // namespace fak::server
