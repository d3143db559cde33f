// Tool calls read as the model writes them, so a stream can send each call as it grows (OpenAI
// `tool_calls[].function.arguments` deltas, Anthropic `input_json_delta`, Responses
// `function_call_arguments.delta`) instead of in one piece at the end.
//
// The model writes Qwen/Hermes blocks: `<tool_call>\n{"name": "f", "arguments": {...}}\n
// </tool_call>`. A call is announced (id and name) once `"arguments":` and the `{` that opens
// them are read, and every byte of the arguments' JSON follows as it comes; a block in another
// shape (arguments first, arguments that are not an object) is parsed whole at the end, as
// extract_tool_calls does. The final list is the calls in the order they were announced, so a
// whole reply and a stream of the same generation agree on ids, names, arguments and order.
//
// A call the generation cut off (max_tokens, or an end token inside it) is dropped from the
// final list, and its text never becomes content: a half tool call is not an answer.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"

namespace fak::chat {

// Part of one call: the event that opens it carries id and name; later ones carry only
// arguments text to append.
struct ToolCallDelta {
  int index = 0;  // which call of the reply, from 0
  std::string id, name;
  std::string arguments;
};

// What a tool-call reader has at the end of a generation.
struct ToolCallsFinal {
  ojson tool_calls = ojson::array();  // OpenAI shape: {id, type, function: {name, arguments}}
  std::string content;                // text outside the blocks, trimmed
  std::vector<ToolCallDelta> deltas;  // calls parsed only now, announced whole
  bool dropped = false;               // a call cut off by the end of the generation was dropped
};

// Reads a model's tool calls as they are generated, in its chat format's syntax
// (chat_format.h): fed the output from the format's opening marker on.
class ToolCallReader {
 public:
  virtual ~ToolCallReader() = default;
  virtual std::vector<ToolCallDelta> push(std::string_view text) = 0;
  // The generation is over. cut: it ended on max_tokens (an unfinished block is then dropped
  // rather than kept as text).
  virtual ToolCallsFinal finish(bool cut) = 0;
};

// The Qwen/Hermes reader.
class ToolCallStream final : public ToolCallReader {
 public:
  using Final = ToolCallsFinal;
  // Text from the first "<tool_call>" on, as it is generated (StopFilter's capture).
  std::vector<ToolCallDelta> push(std::string_view text) override;
  Final finish(bool cut) override;

 private:
  enum class State { Outside, Head, Arguments, Tail, Skip };
  void run(std::vector<ToolCallDelta>& out);
  void close_block(size_t end);

  std::string buf_;
  size_t pos_ = 0;  // everything before it is consumed
  State state_ = State::Outside;
  size_t block_ = 0;  // where the current block's "<tool_call>" begins
  size_t args_ = 0;   // where its arguments begin
  size_t sent_ = 0;   // arguments bytes already sent
  int depth_ = 0;     // JSON nesting inside the arguments
  bool in_string_ = false, escaped_ = false;
  std::string outside_;  // text between and after blocks
  struct Call {
    std::string id, name, arguments;
    bool complete = false;
  };
  std::vector<Call> calls_;  // announced, in order
  // Blocks the stream could not follow, parsed at the end: the body, and where in outside_ the
  // block stood (it goes back there as text if it does not parse).
  struct Body {
    std::string text;
    size_t at = 0;
  };
  std::vector<Body> bodies_;
};

}  // namespace fak::chat
