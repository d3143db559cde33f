// A model's chat format: how its template writes tool calls, and so how fak reads them back from
// the output (streaming or whole) and forces them with a grammar (tool_choice "required" or a
// named function). One format per family of templates, chosen from the template itself, so the
// server's routes, the turn pipeline and `fak chat` never spell a model's markup:
//
// - Hermes (Qwen2.5 / Qwen3, and fak's tool preamble for templates that know no tools):
//     <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
// - GLM-4.5 / 4.6 / 4.7 (a name, then one key / value pair per argument; string values raw, others
//   JSON):
//     <tool_call>f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n</tool_call>
// - Qwen XML (Qwen3-Coder, Qwen3.5, Qwen3.6; qwen_xml_tool_calls.cpp): a function element and
//   one element per parameter, values as text:
//     <tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>\n</function>\n</tool_call>
// - Llama 3.x JSON (llama_json_tool_calls.cpp): the reply is the call, one object per call:
//     {"name": "f", "parameters": {...}}
// - Harmony (gpt-oss; harmony.h): channels for reasoning and the answer, calls as messages to
//   functions.NAME in the commentary channel.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "chat/reply_reader.h"
#include "chat/tool_call_stream.h"
#include "core/json.h"
#include "grammar/grammar.h"

namespace fak::chat {

class ChatFormat {
 public:
  virtual ~ChatFormat() = default;
  virtual std::string_view name() const = 0;  // "hermes", "glm45"
  // The text that opens a tool call: the output from here on goes to the reader, not the content.
  virtual std::string_view tool_call_open() const = 0;
  // Calls only at the start of a reply (its first non-space text is tool_call_open), as Llama 3's
  // bare JSON calls: the same text later in a reply is content.
  virtual bool calls_at_start() const { return false; }
  // A reader for one reply. tools: the request's (OpenAI shape), where the format needs a
  // parameter's type to read its value.
  virtual std::unique_ptr<ToolCallReader> tool_call_reader(const ojson& tools) const = 0;
  // The grammar a forced call follows in this format. Throws fak::Error for bad tools.
  virtual std::shared_ptr<const grammar::Grammar> forced_calls(
      const ojson& tools, const grammar::ToolCallOptions& options) const = 0;
  // A forced call where the format's call starts with markup that is no choice of the model's
  // (harmony's header opens with special tokens): the text, special tokens included, that the
  // prompt gets after its generation prompt; the reply, which forced_calls' grammar covers, goes
  // on from there. Empty: the grammar covers the whole call.
  virtual std::string forced_call_prefix() const { return ""; }
  // The reader of one reply in this format (reply_reader.h): reasoning, answer, stop strings and
  // tool calls. Harmony's lays out the whole reply as its messages, read with the special tokens
  // kept; the others split a <think> block and capture calls from tool_call_open() on.
  virtual std::unique_ptr<ReplyReader> reply_reader(const ReplyOptions& options) const {
    return tagged_reply_reader(*this, options);
  }
  // The special tokens that end an assistant turn, beside the model's eos.
  virtual std::vector<std::string_view> end_of_turn() const {
    return {"<|im_end|>", "<|eot_id|>", "<|end|>", "<|endoftext|>", "<end_of_turn>"};
  }
};

const ChatFormat& hermes_format();
const ChatFormat& glm45_format();
const ChatFormat& qwen_xml_format();
const ChatFormat& llama_json_format();
const ChatFormat& harmony_format();

// The format a template writes calls in: GLM's when it writes <arg_key> pairs, Qwen XML's when it
// writes <function=...> and <parameter=...>, harmony's for gpt-oss, Hermes otherwise (also for
// templates without tool support, whose calls fak writes as Hermes blocks).
const ChatFormat& format_for_template(std::string_view template_source);

// A whole reply's text read by `format` (no streaming): the calls and the text around them.
ToolCallsFinal read_tool_calls(const ChatFormat& format, std::string_view text,
                               const ojson& tools = nullptr);

}  // namespace fak::chat
