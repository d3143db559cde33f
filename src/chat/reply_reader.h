// A model's reply read back as it streams: reasoning apart from the answer, stop strings held back
// and cut, and tool calls in the model's own syntax, as deltas a client can stream. One reader per
// reply, made by its ChatFormat (ChatFormat::reply_reader), so the server's every API and
// `fak chat` read replies the same way and no caller spells a model's markup:
//
//   auto reader = format.reply_reader(options);
//   StreamDecoder text(tokenizer, /*skip_special=*/!reader->reads_special_tokens());
//   for each token:  ReplyDelta d = reader->push(text.push(token));   // stream d
//                    if (reader->stopped()) break;                      // a stop string
//   ReplyDelta last = reader->finish(text.flush(), cut);                // and the final calls
//
// Tagged formats (Hermes, Qwen XML, GLM, Llama 3 JSON) split a <think> block off the start, then
// pass the answer through the stop filter, which captures everything from the format's
// tool-call marker on for its tool-call reader. Harmony (gpt-oss) reads channels instead.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_call_stream.h"
#include "chat/tool_calls.h"
#include "core/json.h"

namespace fak::chat {

struct ReplyOptions {
  std::vector<std::string> stop;    // stop strings: the answer ends before one
  bool capture_tool_calls = false;  // the format's calls become tool calls, not content
  ojson tools;                      // the request's (OpenAI shape): readers type values by them
  bool split_reasoning = false;     // the model writes <think> blocks: reasoning, not content
  bool reasoning_open = false;      // the prompt leaves the reply inside a <think> block
  // A reply whose prompt ended inside a message's header (a forced harmony call).
  std::string header;
};

// What one piece of the reply released.
struct ReplyDelta {
  std::string reasoning, content;
  // Tool calls as they grow (tool_call_stream.h): the first delta of a call has its id and name.
  std::vector<ToolCallDelta> tool_calls;
};

class ReplyReader {
 public:
  virtual ~ReplyReader() = default;
  // Whether the text pushed must keep the special tokens (harmony's channel markers).
  virtual bool reads_special_tokens() const { return false; }
  // Decoded text of the reply (whole UTF-8 characters), as it is generated.
  virtual ReplyDelta push(std::string_view text) = 0;
  // The generation is over: `text` is what the decoder still held; cut: it ended on max_tokens
  // or the context (a call it cut off is dropped, never turned into text).
  virtual ReplyDelta finish(std::string_view text, bool cut) = 0;

  // A stop string matched: the reply is over (stop_sequence says which).
  bool stopped() const { return stopped_; }
  const std::string& stop_sequence() const { return stop_sequence_; }
  // After finish: the reply's calls (OpenAI shape) and its text outside them.
  const ExtractedToolCalls& calls() const { return calls_; }
  // After finish: the reply ends in tool calls (finish_reason "tool_calls"): it has calls, and
  // none was cut off.
  bool ends_in_calls() const { return ends_in_calls_; }

 protected:
  bool stopped_ = false;
  std::string stop_sequence_;
  ExtractedToolCalls calls_;
  bool ends_in_calls_ = false;
};

class ChatFormat;
// The reader of the tagged formats (everything but harmony), for `format`.
std::unique_ptr<ReplyReader> tagged_reply_reader(const ChatFormat& format,
                                                 const ReplyOptions& options);
// Harmony's reader (harmony.h).
std::unique_ptr<ReplyReader> harmony_reply_reader(const ReplyOptions& options);

}  // namespace fak::chat
