// One assistant reply as the block-structured APIs lay it out (Anthropic content blocks, OpenAI
// responses output items): reasoning first, then the text, then each tool call. A stream opens,
// fills and closes the blocks as the Generation releases text; a whole reply is the same walk
// over the finished choice with no one listening, so the two can never disagree.
//
// The rule for the text block: it exists once the text has something besides whitespace, or
// when the reply would otherwise have no block at all (then possibly empty). Whitespace before a
// tool call is held back in a stream until that is known, so it never opens a block the whole
// reply would not have.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "server/generation.h"

namespace fak::server {

struct ReplyBlock {
  enum class Kind { Reasoning, Text, ToolCall };
  Kind kind = Kind::Text;
  std::string text;           // reasoning or text so far; a tool call's arguments (JSON text)
  std::string call_id, name;  // tool calls
};

class ReplyBlocks {
 public:
  // Told of each block as it opens (empty), grows and closes (whole). index: its position in
  // the reply.
  class Sink {
   public:
    virtual ~Sink() = default;
    virtual void open(int index, const ReplyBlock& block) = 0;
    virtual void delta(int index, const ReplyBlock& block, std::string_view text) = 0;
    virtual void close(int index, const ReplyBlock& block) = 0;
  };

  explicit ReplyBlocks(Sink* sink = nullptr) : sink_(sink) {}

  // Text a poll released (ChoiceDelta's reasoning and content).
  void push(std::string_view reasoning, std::string_view content);
  // A tool call as it grows (ChoiceDelta's tool_calls): one with an id opens its block.
  void push_tool_call(const chat::ToolCallDelta& call);
  // Everything a poll released, in the order it was generated.
  void push(const ChoiceDelta& delta);
  // The choice is done (every delta pushed): what it holds beyond what was pushed (text that
  // turned out not to be a tool call, text after the calls), and the last block closes.
  void finish(const Generation::Choice& choice);
  const std::vector<ReplyBlock>& blocks() const { return blocks_; }

  // The blocks of a finished choice, as a whole reply.
  static std::vector<ReplyBlock> of(const Generation::Choice& choice);

 private:
  void open(ReplyBlock::Kind kind);
  void append(std::string_view text);
  void close();

  Sink* sink_;
  std::vector<ReplyBlock> blocks_;
  bool is_open_ = false;
  std::string pending_;  // whitespace-only text not yet in a block
  size_t seen_reasoning_ = 0, seen_content_ = 0;
};

// One server-sent event with an event name, as Anthropic and the responses API frame them:
// "event: NAME\ndata: JSON\n\n".
std::string sse_event(std::string_view name, const ojson& data);

}  // namespace fak::server
