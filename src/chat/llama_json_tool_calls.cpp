// Llama 3.1 / 3.2 / 3.3 tool calls (chat_format.h): the reply is the call, one JSON object, as the
// template tells the model ('Respond in the format {"name": function name, "parameters":
// dictionary of argument name and its value}') and renders past calls:
//
//   {"name": "get_weather", "parameters": {"city": "Paris"}}
//
// Several calls in one reply are objects one after another (separated by white space or ';', as
// Llama 3 models write them and vLLM's llama3_json parser reads them). "arguments" is read like
// "parameters". A call is announced whole when its object closes; an object that is not a call
// stays text.
#include "chat/chat_format.h"
#include "core/object_id.h"

namespace fak::chat {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

// Where the JSON value starting at text[0] ('{') ends (one past its '}'), or npos when it does
// not end within text.
size_t object_end(std::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

class LlamaJsonToolCallReader final : public ToolCallReader {
 public:
  std::vector<ToolCallDelta> push(std::string_view text) override {
    buf_ += text;
    std::vector<ToolCallDelta> out;
    for (;;) {
      size_t at = 0;
      while (at < buf_.size() && (is_space(buf_[at]) || buf_[at] == ';')) ++at;
      if (at == buf_.size()) return out;
      if (buf_[at] != '{') {  // not a call: the rest is text
        outside_ += buf_;
        buf_.clear();
        text_only_ = true;
        return out;
      }
      if (text_only_) {
        outside_ += buf_;
        buf_.clear();
        return out;
      }
      const size_t end = object_end(std::string_view(buf_).substr(at));
      if (end == std::string_view::npos) return out;
      take(std::string_view(buf_).substr(at, end), out);
      buf_.erase(0, at + end);
    }
  }

  ToolCallsFinal finish(bool cut) override {
    ToolCallsFinal f;
    size_t at = 0;
    while (at < buf_.size() && is_space(buf_[at])) ++at;
    if (at < buf_.size()) {
      // An object the generation stopped inside: never text, never a call.
      if (buf_[at] == '{' && !text_only_)
        f.dropped = true;
      else
        outside_ += buf_;
    }
    (void)cut;
    buf_.clear();
    f.tool_calls = calls_;
    size_t b = outside_.find_first_not_of(" \t\r\n;");
    f.content = b == std::string::npos
                    ? ""
                    : outside_.substr(b, outside_.find_last_not_of(" \t\r\n") - b + 1);
    return f;
  }

 private:
  void take(std::string_view object, std::vector<ToolCallDelta>& out) {
    ojson j =
        json_depth(object) <= kMaxJsonDepth ? ojson::parse(object, nullptr, false) : ojson(nullptr);
    // note: a call names its function and its arguments (the template always writes both); an
    // object without them is text.
    if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string() ||
        !(j.contains("parameters") || j.contains("arguments"))) {
      outside_ += std::string(object);
      text_only_ = true;
      return;
    }
    ojson args = j.contains("parameters")  ? j["parameters"]
                 : j.contains("arguments") ? j["arguments"]
                                           : ojson::object();
    ojson call = ojson::object();
    call["id"] = new_object_id("call_");
    call["type"] = "function";
    call["function"] = {{"name", j["name"]},
                        {"arguments", args.is_string() ? args.get<std::string>() : args.dump()}};
    ToolCallDelta d;
    d.index = int(calls_.size());
    d.id = call["id"].get<std::string>();
    d.name = j["name"].get<std::string>();
    d.arguments = call["function"]["arguments"].get<std::string>();
    out.push_back(std::move(d));
    calls_.push_back(std::move(call));
  }

  std::string buf_, outside_;
  bool text_only_ = false;  // something other than calls came: the rest is content
  ojson calls_ = ojson::array();
};

}  // namespace

std::unique_ptr<ToolCallReader> llama_json_tool_call_reader() {
  return std::make_unique<LlamaJsonToolCallReader>();
}

}  // namespace fak::chat
