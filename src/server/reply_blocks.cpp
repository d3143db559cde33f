#include "server/reply_blocks.h"

#include "server/chat_turn.h"

namespace fak::server {

namespace {

bool blank(std::string_view s) {
  return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

}  // namespace

void ReplyBlocks::open(ReplyBlock::Kind kind) {
  close();
  blocks_.push_back({});
  blocks_.back().kind = kind;
  is_open_ = true;
  if (sink_) sink_->open(int(blocks_.size()) - 1, blocks_.back());
}

void ReplyBlocks::append(std::string_view text) {
  if (text.empty()) return;
  blocks_.back().text.append(text);
  if (sink_) sink_->delta(int(blocks_.size()) - 1, blocks_.back(), text);
}

void ReplyBlocks::close() {
  if (!is_open_) return;
  is_open_ = false;
  if (sink_) sink_->close(int(blocks_.size()) - 1, blocks_.back());
}

void ReplyBlocks::push(std::string_view reasoning, std::string_view content) {
  seen_reasoning_ += reasoning.size();
  seen_content_ += content.size();
  if (!reasoning.empty()) {
    if (!is_open_ || blocks_.back().kind != ReplyBlock::Kind::Reasoning)
      open(ReplyBlock::Kind::Reasoning);
    append(reasoning);
  }
  if (content.empty()) return;
  if (is_open_ && blocks_.back().kind == ReplyBlock::Kind::Text) {
    append(content);
    return;
  }
  pending_.append(content);
  if (blank(pending_)) return;
  open(ReplyBlock::Kind::Text);
  append(pending_);
  pending_.clear();
}

void ReplyBlocks::push_tool_call(const chat::ToolCallDelta& call) {
  if (!call.id.empty()) {
    close();
    pending_.clear();  // whitespace before a call opens no text block
    blocks_.push_back({});
    ReplyBlock& b = blocks_.back();
    b.kind = ReplyBlock::Kind::ToolCall;
    b.call_id = call.id;
    b.name = call.name;
    is_open_ = true;
    if (sink_) sink_->open(int(blocks_.size()) - 1, b);
  }
  if (is_open_ && blocks_.back().kind == ReplyBlock::Kind::ToolCall) append(call.arguments);
}

void ReplyBlocks::push(const ChoiceDelta& d) {
  push(d.reasoning, d.content);
  for (const chat::ToolCallDelta& call : d.tool_calls) push_tool_call(call);
}

void ReplyBlocks::finish(const Generation::Choice& c) {
  const bool calls = !c.tool_calls.tool_calls.empty();
  // Generation adds to the choice at its close what no delta carried (a <tool_call> block that
  // did not parse stays text); the text after parsed calls comes last.
  const std::string_view more_reasoning =
      seen_reasoning_ < c.reasoning.size() ? std::string_view(c.reasoning).substr(seen_reasoning_)
                                           : std::string_view();
  std::string more_content =
      seen_content_ < c.content.size() ? c.content.substr(seen_content_) : std::string();
  if (calls) more_content += c.tool_calls.content;
  push(more_reasoning, more_content);
  if (blocks_.empty()) {  // nothing at all: one text block, maybe empty
    open(ReplyBlock::Kind::Text);
    append(pending_);
  }
  pending_.clear();
  close();
}

std::vector<ReplyBlock> ReplyBlocks::of(const Generation::Choice& choice) {
  // The walk a stream makes: reasoning and text, then each call whole, then the rest.
  ReplyBlocks b;
  b.push(choice.reasoning, choice.content);
  const ojson& calls = choice.tool_calls.tool_calls;
  for (size_t i = 0; i < calls.size(); ++i)
    b.push_tool_call({int(i), calls[i]["id"].get<std::string>(),
                      calls[i]["function"]["name"].get<std::string>(),
                      calls[i]["function"]["arguments"].get<std::string>()});
  b.finish(choice);
  return b.blocks_;
}

std::string sse_event(std::string_view name, const ojson& data) {
  return "event: " + std::string(name) + "\ndata: " + dump(data) + "\n\n";
}

}  // namespace fak::server
