// The chat formats fak knows (chat_format.h), and how a template tells which it writes.
#include "chat/chat_format.h"

#include <string>

#include "chat/tool_calls.h"
#include "core/error.h"

namespace fak::chat {

std::unique_ptr<ToolCallReader> glm_tool_call_reader(const ojson& tools);  // glm_tool_calls.cpp
std::unique_ptr<ToolCallReader> qwen_xml_tool_call_reader(const ojson& tools);  // qwen_xml_...
std::unique_ptr<ToolCallReader> llama_json_tool_call_reader();  // llama_json_tool_calls.cpp

namespace {

class HermesFormat final : public ChatFormat {
 public:
  std::string_view name() const override { return "hermes"; }
  std::string_view tool_call_open() const override { return kToolCallOpen; }
  std::unique_ptr<ToolCallReader> tool_call_reader(const ojson&) const override {
    return std::make_unique<ToolCallStream>();
  }
  std::shared_ptr<const grammar::Grammar> forced_calls(
      const ojson& tools, const grammar::ToolCallOptions& options) const override {
    return grammar::compile_tool_calls(tools, options);
  }
};

class Glm45Format final : public ChatFormat {
 public:
  std::string_view name() const override { return "glm45"; }
  std::string_view tool_call_open() const override { return "<tool_call>"; }
  std::unique_ptr<ToolCallReader> tool_call_reader(const ojson& tools) const override {
    return glm_tool_call_reader(tools);
  }
  std::shared_ptr<const grammar::Grammar> forced_calls(
      const ojson& tools, const grammar::ToolCallOptions& options) const override {
    return grammar::compile_glm_tool_calls(tools, options);
  }
};

class QwenXmlFormat final : public ChatFormat {
 public:
  std::string_view name() const override { return "qwen_xml"; }
  std::string_view tool_call_open() const override { return "<tool_call>"; }
  std::unique_ptr<ToolCallReader> tool_call_reader(const ojson& tools) const override {
    return qwen_xml_tool_call_reader(tools);
  }
  std::shared_ptr<const grammar::Grammar> forced_calls(
      const ojson& tools, const grammar::ToolCallOptions& options) const override {
    return grammar::compile_qwen_xml_tool_calls(tools, options);
  }
};

class LlamaJsonFormat final : public ChatFormat {
 public:
  std::string_view name() const override { return "llama3_json"; }
  // note: the reply is the call: a JSON object at its start.
  std::string_view tool_call_open() const override { return "{"; }
  bool calls_at_start() const override { return true; }
  std::unique_ptr<ToolCallReader> tool_call_reader(const ojson&) const override {
    return llama_json_tool_call_reader();
  }
  std::shared_ptr<const grammar::Grammar> forced_calls(
      const ojson& tools, const grammar::ToolCallOptions& options) const override {
    return grammar::compile_json_tool_calls(tools, options, "", "", "parameters", "; ");
  }
  std::vector<std::string_view> end_of_turn() const override {
    return {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"};
  }
};

class HarmonyFormat final : public ChatFormat {
 public:
  std::string_view name() const override { return "harmony"; }
  std::string_view tool_call_open() const override { return "<|channel|>"; }
  std::unique_ptr<ToolCallReader> tool_call_reader(const ojson&) const override {
    return std::make_unique<ToolCallStream>();  // unused: its reply_reader reads the calls
  }
  // The prompt ends inside a call's header, at the recipient (forced_call_prefix: special
  // tokens, then "commentary to=functions."); the grammar holds the function's name (any listed
  // one, or the named one), the rest of the header with its special tokens, and the arguments'
  // JSON; <|call|>, a stop id, is the one token it allows once they are whole.
  std::shared_ptr<const grammar::Grammar> forced_calls(
      const ojson& tools, const grammar::ToolCallOptions& options) const override {
    return grammar::compile_harmony_tool_calls(tools, options);
  }
  std::string forced_call_prefix() const override { return "<|channel|>commentary to=functions."; }
  std::unique_ptr<ReplyReader> reply_reader(const ReplyOptions& options) const override {
    return harmony_reply_reader(options);
  }
  // <|end|> ends one message of a reply, not the turn.
  std::vector<std::string_view> end_of_turn() const override {
    return {"<|return|>", "<|call|>", "<|endoftext|>"};
  }
};

}  // namespace

const ChatFormat& harmony_format() {
  static const HarmonyFormat f;
  return f;
}

const ChatFormat& hermes_format() {
  static const HermesFormat f;
  return f;
}

const ChatFormat& glm45_format() {
  static const Glm45Format f;
  return f;
}

const ChatFormat& qwen_xml_format() {
  static const QwenXmlFormat f;
  return f;
}

const ChatFormat& llama_json_format() {
  static const LlamaJsonFormat f;
  return f;
}

const ChatFormat& format_for_template(std::string_view source) {
  if (source.find("<|channel|>") != std::string_view::npos &&
      source.find("<|message|>") != std::string_view::npos)
    return harmony_format();
  if (source.find("<arg_key>") != std::string_view::npos &&
      source.find("<arg_value>") != std::string_view::npos)
    return glm45_format();
  if (source.find("<function=") != std::string_view::npos &&
      source.find("<parameter=") != std::string_view::npos)
    return qwen_xml_format();
  if (source.find("\"parameters\": dictionary of argument name") != std::string_view::npos ||
      source.find("<|python_tag|>") != std::string_view::npos)
    return llama_json_format();
  return hermes_format();
}

ToolCallsFinal read_tool_calls(const ChatFormat& format, std::string_view text,
                               const ojson& tools) {
  size_t at = text.find(format.tool_call_open());
  if (format.calls_at_start()) {
    const size_t first = text.find_first_not_of(" \t\r\n");
    at = first != std::string_view::npos && text.substr(first).starts_with(format.tool_call_open())
             ? first
             : std::string_view::npos;
  }
  const std::string before(text.substr(0, at == std::string_view::npos ? text.size() : at));
  ToolCallsFinal f;
  if (at != std::string_view::npos) {
    std::unique_ptr<ToolCallReader> reader = format.tool_call_reader(tools);
    reader->push(text.substr(at));
    f = reader->finish(/*cut=*/false);
  }
  // The text before the first call, then the text between and after the calls; with no call, the
  // text as it was.
  std::string content = before;
  if (f.tool_calls.empty() && !f.dropped && at != std::string_view::npos)
    content = std::string(text);
  else if (!f.content.empty())
    content += (content.empty() ? "" : "\n") + f.content;
  const size_t b = content.find_first_not_of(" \t\r\n");
  f.content =
      b == std::string::npos ? "" : content.substr(b, content.find_last_not_of(" \t\r\n") - b + 1);
  return f;
}

}  // namespace fak::chat
