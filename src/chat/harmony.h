// OpenAI's harmony format (gpt-oss): a reply is a run of messages, each a header and a body
//
//   <|channel|>analysis<|message|>...reasoning...<|end|>
//   <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>
//       {"city": "Paris"}<|call|>
//   <|start|>assistant<|channel|>final<|message|>...the answer...<|return|>
//
// with the markers special tokens (kept in the decoded text for this reader). The analysis channel
// is reasoning; final is the answer; a message to a recipient ("to=functions.NAME", in the header
// before or after the channel) is a tool call whose body is its JSON arguments; commentary to no
// one (a preamble the model shows the user) is content. <|return|> and <|call|> end the turn.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_call_stream.h"

namespace fak::chat {

struct ReplyParts {
  std::string reasoning, content;
  std::vector<ToolCallDelta> calls;  // whole calls, announced when their message ends
};

class HarmonyReader {
 public:
  HarmonyReader() = default;
  // A reply whose prompt ended inside a message's header (ChatFormat::forced_call_prefix): the
  // reply goes on from there.
  explicit HarmonyReader(std::string_view header);
  // Decoded text of the reply (special tokens included), as it is generated.
  ReplyParts push(std::string_view text);
  // The generation is over; cut: by max_tokens (a call it cut off is dropped, `dropped` says so).
  ReplyParts finish(bool cut);
  bool dropped() const { return dropped_; }
  // Every call of the reply so far, OpenAI shape ({id, type, function: {name, arguments}}).
  const ojson& calls() const { return calls_; }

 private:
  enum class State { Header, Body };
  void run(ReplyParts& out, bool at_end);
  void end_message(ReplyParts& out, bool complete);
  void emit(std::string_view text, ReplyParts& out);

  std::string buf_;
  State state_ = State::Header;
  std::string channel_, recipient_;
  std::string body_;  // a call's arguments so far
  bool dropped_ = false;
  ojson calls_ = ojson::array();
};

}  // namespace fak::chat
