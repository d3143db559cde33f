// Qwen3-Coder / Qwen3.5 / Qwen3.6 tool calls (chat_format.h): XML-like blocks, one parameter per
// element, the value as plain text between newlines, as their templates write past calls and tell
// the model to:
//
//   <tool_call>
//   <function=get_weather>
//   <parameter=city>
//   Paris
//   </parameter>
//   <parameter=days>
//   3
//   </parameter>
//   </function>
//   </tool_call>
//
// A value becomes JSON as vLLM's qwen3_coder parser makes it: "null" is null; then by the tool's
// schema type: a string type keeps the text; integer and number types parse it (a number with no
// fraction becomes an integer), booleans are "true" whatever the case; objects, arrays and
// anything else parse as JSON, and stay text where they do not; a parameter the schema does not
// list stays text. The call is announced when <function=NAME> is read, and its arguments' JSON
// follows one parameter at a time ({"city": "Paris" ... , "days": 3 ... }), so a stream sends
// each argument as soon as it is whole.
#include <cmath>
#include <cstdlib>
#include <optional>

#include "chat/chat_format.h"
#include "core/object_id.h"

namespace fak::chat {

namespace {

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
constexpr std::string_view kFunctionOpen = "<function=", kFunctionClose = "</function>";
constexpr std::string_view kParamOpen = "<parameter=", kParamClose = "</parameter>";

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// The value as the template wrote it: one newline after the opening tag and one before the
// closing tag are markup, not value.
std::string_view value_text(std::string_view v) {
  if (v.starts_with("\n")) v.remove_prefix(1);
  if (v.ends_with("\n")) v.remove_suffix(1);
  return v;
}

const ojson* tool_parameters(const ojson& tools, std::string_view name) {
  if (!tools.is_array()) return nullptr;
  for (const ojson& t : tools) {
    const ojson* f = t.is_object() && t.contains("function") ? &t["function"] : nullptr;
    if (!f || !f->is_object() || !f->contains("name") || (*f)["name"] != name) continue;
    if (!f->contains("parameters") || !(*f)["parameters"].is_object()) return nullptr;
    const ojson& params = (*f)["parameters"];
    return params.contains("properties") && params["properties"].is_object() ? &params["properties"]
                                                                             : nullptr;
  }
  return nullptr;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<ojson> parse_json(std::string_view text) {
  if (json_depth(text) > kMaxJsonDepth) return std::nullopt;
  ojson v = ojson::parse(text, nullptr, false);
  if (v.is_discarded()) return std::nullopt;
  return v;
}

ojson convert(std::string_view text, const ojson* properties, const std::string& key) {
  if (lower(text) == "null") return nullptr;
  if (!properties || !properties->contains(key) || !(*properties)[key].is_object())
    return std::string(text);
  const ojson& schema = (*properties)[key];
  std::string type = schema.contains("type") && schema["type"].is_string()
                         ? lower(schema["type"].get<std::string>())
                         : "object";
  if (type == "string" || type == "str" || type == "text" || type == "varchar" || type == "char" ||
      type == "enum")
    return std::string(text);
  const std::string s(trim(text));
  if (type.starts_with("int") || type.starts_with("uint") || type.starts_with("long") ||
      type.starts_with("short") || type.starts_with("unsigned")) {
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && end == s.c_str() + s.size()) return int64_t(v);
    return std::string(text);
  }
  if (type.starts_with("num") || type.starts_with("float")) {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) return std::string(text);
    if (v == std::floor(v) && std::fabs(v) < 9.2e18) return int64_t(v);
    return v;
  }
  if (type == "boolean" || type == "bool" || type == "binary") return lower(s) == "true";
  if (auto v = parse_json(s)) return *v;
  return std::string(text);
}

class QwenXmlToolCallReader final : public ToolCallReader {
 public:
  explicit QwenXmlToolCallReader(ojson tools) : tools_(std::move(tools)) {}

  std::vector<ToolCallDelta> push(std::string_view text) override {
    buf_ += text;
    std::vector<ToolCallDelta> out;
    while (step(out)) {
    }
    return out;
  }

  ToolCallsFinal finish(bool cut) override {
    ToolCallsFinal f;
    if (state_ == State::Outside) {
      outside_ += buf_;
    } else if (!cut && state_ != State::Block && state_ != State::Parameter && call_open_) {
      // Stopped inside a block after whole parameters (an end token, not max_tokens): the call is
      // kept as far as it is whole.
      close_call(f.deltas);
    } else if (call_open_ || state_ != State::Outside) {
      f.dropped = true;
      if (call_open_) calls_.erase(calls_.size() - 1);
    }
    buf_.clear();
    f.tool_calls = calls_;
    f.content = std::string(trim(outside_));
    return f;
  }

 private:
  enum class State { Outside, Block, Function, Parameter, AfterFunction };

  // One move forward; false when it needs more text.
  bool step(std::vector<ToolCallDelta>& out) {
    switch (state_) {
      case State::Outside: {
        const size_t at = buf_.find(kOpen);
        if (at == std::string::npos) {
          keep_tail(kOpen);
          return false;
        }
        outside_ += buf_.substr(0, at);
        buf_.erase(0, at + kOpen.size());
        block_text_ = std::string(kOpen);
        state_ = State::Block;
        return true;
      }
      case State::Block: {
        // "<function=NAME>" after white space; anything else: the block is text.
        const std::string_view b = trim_front(buf_);
        if (b.size() < kFunctionOpen.size())
          return kFunctionOpen.starts_with(b) ? false : not_a_call();
        if (!b.starts_with(kFunctionOpen)) return not_a_call();
        const size_t end = b.find('>');
        if (end == std::string_view::npos) return b.size() > 256 ? not_a_call() : false;
        const std::string name(trim(b.substr(kFunctionOpen.size(), end - kFunctionOpen.size())));
        if (name.empty() || name.find_first_of("<\n") != std::string::npos) return not_a_call();
        consume(size_t(b.data() - buf_.data()) + end + 1);
        open_call(name, out);
        state_ = State::Function;
        return true;
      }
      case State::Function: {
        const std::string_view b = trim_front(buf_);
        if (b.starts_with(kParamOpen)) {
          const size_t end = b.find('>');
          if (end == std::string_view::npos) return b.size() > 256 ? malformed() : false;
          param_ = std::string(trim(b.substr(kParamOpen.size(), end - kParamOpen.size())));
          if (param_.empty()) return malformed();
          consume(size_t(b.data() - buf_.data()) + end + 1);
          state_ = State::Parameter;
          return true;
        }
        if (b.starts_with(kFunctionClose)) {
          consume(size_t(b.data() - buf_.data()) + kFunctionClose.size());
          state_ = State::AfterFunction;
          return true;
        }
        if (b.size() < std::max(kParamOpen.size(), kFunctionClose.size()) &&
            (kParamOpen.starts_with(b) || kFunctionClose.starts_with(b)))
          return false;
        return b.empty() ? false : malformed();
      }
      case State::AfterFunction: {
        // Up to </tool_call>: white space only.
        const std::string_view rest = trim_front(buf_);
        if (rest.size() < kClose.size()) return kClose.starts_with(rest) ? false : malformed();
        if (!rest.starts_with(kClose)) return malformed();
        consume(size_t(rest.data() - buf_.data()) + kClose.size());
        close_call(out);
        state_ = State::Outside;
        return true;
      }
      case State::Parameter: {
        const size_t end = buf_.find(kParamClose);
        if (end == std::string::npos) return false;
        ojson value = convert(value_text(std::string_view(buf_).substr(0, end)),
                              tool_parameters(tools_, name_), param_);
        consume(end + kParamClose.size());
        emit_argument(param_, value, out);
        state_ = State::Function;
        return true;
      }
    }
    return false;
  }

  std::string_view trim_front(std::string_view s) const {
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    return s;
  }

  void consume(size_t n) {
    block_text_ += buf_.substr(0, n);
    buf_.erase(0, n);
  }

  // Keeps in buf_ only what could still become `marker`; the rest is text.
  void keep_tail(std::string_view marker) {
    size_t cut = buf_.size() - std::min(buf_.size(), marker.size() - 1);
    while (cut < buf_.size() && !marker.starts_with(std::string_view(buf_).substr(cut))) ++cut;
    outside_ += buf_.substr(0, cut);
    buf_.erase(0, cut);
  }

  // The block is not a call: it is text, the reader looks for the next one.
  bool not_a_call() {
    outside_ += block_text_;
    block_text_.clear();
    state_ = State::Outside;
    return true;
  }

  // A call that went wrong after it was announced: what it has is kept (its arguments so far).
  bool malformed() {
    std::vector<ToolCallDelta> ignored;
    close_call(ignored);
    outside_ += buf_;
    buf_.clear();
    state_ = State::Outside;
    return false;
  }

  void open_call(const std::string& name, std::vector<ToolCallDelta>& out) {
    name_ = name;
    ToolCallDelta d;
    d.index = int(calls_.size());
    d.id = new_object_id("call_");
    d.name = name;
    out.push_back(d);
    ojson call = ojson::object();
    call["id"] = d.id;
    call["type"] = "function";
    call["function"] = {{"name", name}, {"arguments", "{}"}};
    calls_.push_back(std::move(call));
    args_ = ojson::object();
    sent_.clear();
    call_open_ = true;
  }

  void emit_argument(const std::string& key, ojson value, std::vector<ToolCallDelta>& out) {
    ToolCallDelta d;
    d.index = int(calls_.size()) - 1;
    d.arguments = (sent_.empty() ? "{" : ", ") + ojson(key).dump() + ": " + value.dump();
    sent_ += d.arguments;
    args_[key] = std::move(value);
    out.push_back(std::move(d));
  }

  void close_call(std::vector<ToolCallDelta>& out) {
    if (!call_open_) return;
    ToolCallDelta d;
    d.index = int(calls_.size()) - 1;
    d.arguments = sent_.empty() ? "{}" : "}";
    out.push_back(std::move(d));
    // note: the arguments string is the object dumped whole, which equals what was streamed
    // (the same keys and values in the same order).
    calls_.back()["function"]["arguments"] = args_.dump();
    call_open_ = false;
    block_text_.clear();
  }

  ojson tools_;
  std::string buf_, outside_, block_text_;
  State state_ = State::Outside;
  std::string name_, param_, sent_;
  ojson args_ = ojson::object();
  bool call_open_ = false;
  ojson calls_ = ojson::array();
};

}  // namespace

std::unique_ptr<ToolCallReader> qwen_xml_tool_call_reader(const ojson& tools) {
  return std::make_unique<QwenXmlToolCallReader>(tools);
}

}  // namespace fak::chat
