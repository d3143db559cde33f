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

void ReplyBlocks::finish(const Generation::Choice& c) {
  const bool calls = !c.tool_calls.tool_calls.empty();
  // Generation adds to the choice at its close what no delta carried (a <tool_call> block that
  // did not parse stays text); the text around parsed calls comes apart from them.
  const std::string_view more_reasoning =
      seen_reasoning_ < c.reasoning.size() ? std::string_view(c.reasoning).substr(seen_reasoning_)
                                           : std::string_view();
  std::string more_content =
      seen_content_ < c.content.size() ? c.content.substr(seen_content_) : std::string();
  if (calls) more_content += c.tool_calls.content;
  push(more_reasoning, more_content);
  if (blocks_.empty() && !calls) {  // nothing at all: one text block, maybe empty
    open(ReplyBlock::Kind::Text);
    append(pending_);
  }
  pending_.clear();
  close();
  for (const ojson& call : c.tool_calls.tool_calls) {
    blocks_.push_back({});
    ReplyBlock& b = blocks_.back();
    b.kind = ReplyBlock::Kind::ToolCall;
    // A fresh id rather than the extractor's: agents keep ids across server restarts in their
    // history, and ids must not repeat there.
    b.call_id = new_object_id("call_");
    b.name = call["function"]["name"].get<std::string>();
    is_open_ = true;
    if (sink_) sink_->open(int(blocks_.size()) - 1, b);
    append(call["function"]["arguments"].get<std::string>());
    close();
  }
}

std::vector<ReplyBlock> ReplyBlocks::of(const Generation::Choice& choice) {
  ReplyBlocks b;
  b.finish(choice);
  return b.blocks_;
}

std::string sse_event(std::string_view name, const ojson& data) {
  return "event: " + std::string(name) + "\ndata: " + dump(data) + "\n\n";
}

}  // namespace fak::server
