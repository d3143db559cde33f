#include "chat/tool_calls.h"

#include "core/json.h"
#include "core/object_id.h"

namespace fak::chat {

namespace {

std::string trim(std::string_view s) {
  const char* ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return "";
  return std::string(s.substr(b, s.find_last_not_of(ws) - b + 1));
}

}  // namespace

bool parse_tool_call_body(std::string_view body, ojson& call) {
  if (json_depth(body) > kMaxJsonDepth) return false;  // stays text rather than a deep tree
  ojson j = ojson::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string())
    return false;
  ojson args = j.contains("arguments") ? j["arguments"] : ojson::object();
  call = ojson::object();
  call["id"] = new_object_id("call_");
  call["type"] = "function";
  // OpenAI sends arguments as a JSON-encoded string.
  call["function"] = {{"name", j["name"]},
                      {"arguments", args.is_string() ? args.get<std::string>() : args.dump()}};
  return true;
}

ExtractedToolCalls extract_tool_calls(std::string_view text) {
  ExtractedToolCalls out;
  std::string content;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find(kToolCallOpen, pos);
    if (open == std::string_view::npos) break;
    const size_t body = open + kToolCallOpen.size();
    size_t close = text.find(kToolCallClose, body);
    const size_t end =
        close == std::string_view::npos ? text.size() : close + kToolCallClose.size();
    if (close == std::string_view::npos) close = text.size();
    ojson call;
    content.append(text.substr(pos, open - pos));
    if (parse_tool_call_body(trim(text.substr(body, close - body)), call))
      out.tool_calls.push_back(std::move(call));
    else
      content.append(text.substr(open, end - open));
    pos = end;
  }
  if (pos < text.size()) content.append(text.substr(pos));
  out.content = out.tool_calls.empty() ? std::string(text) : trim(content);
  return out;
}

ojson messages_for_plain_template(const ojson& messages, const ojson& tools) {
  ojson out = ojson::array();
  if (tools.is_array() && !tools.empty()) {
    std::string preamble =
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const ojson& t : tools) preamble += "\n" + t.dump();
    preamble +=
        "\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
        "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
    if (!messages.empty() && messages[0]["role"] == "system") {
      ojson first = messages[0];
      first["content"] = first["content"].get<std::string>() + "\n\n" + preamble;
      out.push_back(std::move(first));
    } else {
      out.push_back({{"role", "system"}, {"content", preamble}});
    }
  }
  // note: messages may be empty (a conversation that is only an assistant prefill).
  const bool merged_system = !out.empty() && !messages.empty() && messages[0]["role"] == "system";
  for (size_t i = merged_system ? 1 : 0; i < messages.size(); ++i) {
    ojson m = messages[i];
    if (m.contains("tool_calls")) {
      std::string text = m["content"].get<std::string>();
      for (const ojson& c : m["tool_calls"]) {
        ojson call = {{"name", c["function"]["name"]}, {"arguments", c["function"]["arguments"]}};
        text += (text.empty() ? "" : "\n") + std::string(kToolCallOpen) + "\n" + call.dump() +
                "\n" + std::string(kToolCallClose);
      }
      m["content"] = text;
      m.erase("tool_calls");
    } else if (m["role"] == "tool") {
      m["content"] = "<tool_response>\n" + m["content"].get<std::string>() + "\n</tool_response>";
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace fak::chat
