#include "server/anthropic_format.h"

#include "server/context.h"

namespace fak::server {

std::string anthropic_stop_reason(const Generation::Choice& c) {
  if (c.finish_reason == "tool_calls") return "tool_use";
  if (c.finish_reason == "length") return "max_tokens";
  return c.stop_sequence.empty() ? "end_turn" : "stop_sequence";
}

ojson anthropic_usage(const Usage& u) {
  ojson j;
  j["input_tokens"] = u.prompt_tokens - u.cached_tokens;
  j["cache_creation_input_tokens"] = 0;
  j["cache_read_input_tokens"] = u.cached_tokens;
  j["output_tokens"] = u.completion_tokens;
  return j;
}

ojson anthropic_block(const ReplyBlock& b, bool start) {
  ojson j;
  switch (b.kind) {
    case ReplyBlock::Kind::Reasoning:
      j["type"] = "thinking";
      j["thinking"] = start ? "" : b.text;
      // Anthropic signs its own thinking so it can be sent back; fak's needs no signature, but
      // clients expect the field.
      j["signature"] = "";
      return j;
    case ReplyBlock::Kind::Text:
      j["type"] = "text";
      j["text"] = start ? "" : b.text;
      return j;
    case ReplyBlock::Kind::ToolCall: {
      j["type"] = "tool_use";
      // The call's id, in Anthropic's spelling (the hex part is unique already).
      const std::string hex = b.call_id.rfind("call_", 0) == 0 ? b.call_id.substr(5) : b.call_id;
      j["id"] = "toolu_" + hex;
      j["name"] = b.name;
      ojson input = ojson::parse(b.text, nullptr, false);
      // note: a model that wrote its arguments as something other than an object still has them
      // reach the client, under one key, rather than lost.
      if (input.is_discarded() || !input.is_object()) input = {{"arguments", b.text}};
      j["input"] = start ? ojson::object() : input;
      return j;
    }
  }
  return j;
}

ojson anthropic_message(const std::string& id, const std::string& model, const ojson& content,
                        const std::string& stop_reason, const std::string& stop_sequence,
                        const Usage& usage) {
  ojson j;
  j["id"] = id;
  j["type"] = "message";
  j["role"] = "assistant";
  j["model"] = model;
  j["content"] = content;
  j["stop_reason"] = stop_reason.empty() ? ojson() : ojson(stop_reason);
  j["stop_sequence"] = stop_sequence.empty() ? ojson() : ojson(stop_sequence);
  j["usage"] = anthropic_usage(usage);
  return j;
}

std::string anthropic_error_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 402:
      return "billing_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
    case 529:
      return "overloaded_error";
    case 504:
      return "timeout_error";
  }
  return status >= 500 ? "api_error" : "invalid_request_error";
}

int anthropic_status(int status) {
  if (status == 503) return 529;
  if (status == 507) return 500;  // the server's disk: Anthropic has no status of its own for it
  return status;
}

ojson anthropic_error_body(const std::string& type, const std::string& message) {
  return {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
}

void reply_anthropic_error(HttpResponse& res, int status, const std::string& message) {
  reply_json(res, anthropic_status(status),
             anthropic_error_body(anthropic_error_type(status), message));
}

HttpHandler anthropic_guarded(HttpHandler fn) {
  // The errors are found and worded once, by guarded(); only their shape changes here.
  return [inner = guarded(std::move(fn))](const HttpRequest& req, HttpResponse& res) {
    inner(req, res);
    if (res.status < 400 || res.stream) return;
    const ojson body = ojson::parse(res.body, nullptr, false);
    std::string message = res.body;
    if (!body.is_discarded() && body.contains("error") && body["error"].is_object() &&
        body["error"].contains("message") && body["error"]["message"].is_string())
      message = body["error"]["message"].get<std::string>();
    reply_anthropic_error(res, res.status, message);
  };
}

}  // namespace fak::server
