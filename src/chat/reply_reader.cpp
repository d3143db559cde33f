// The two reply readers (reply_reader.h): the tagged formats' (think splitter, stop filter,
// tool-call capture) and harmony's (channels, stop filter over the answer).
#include "chat/reply_reader.h"

#include <algorithm>

#include "chat/chat_format.h"
#include "chat/harmony.h"
#include "chat/reasoning.h"
#include "chat/stop_filter.h"

namespace fak::chat {

namespace {

// The longest stop string less one byte: captured text this close to its end may still be cut
// back by a stop string the next piece completes, so it waits.
size_t longest_stop(const std::vector<std::string>& stops) {
  size_t n = 0;
  for (const std::string& s : stops) n = std::max(n, s.size());
  return n > 0 ? n - 1 : 0;
}

class TaggedReplyReader final : public ReplyReader {
 public:
  TaggedReplyReader(const ChatFormat& format, const ReplyOptions& o)
      : reasoning_(o.split_reasoning, o.reasoning_open),
        filter_(o.stop, o.capture_tool_calls ? std::string(format.tool_call_open()) : "",
                format.calls_at_start()),
        calls_reader_(format.tool_call_reader(o.tools)),
        capture_(o.capture_tool_calls),
        holdback_(longest_stop(o.stop)) {}

  ReplyDelta push(std::string_view text) override {
    ReplyDelta d;
    if (stopped_) return d;
    const ReasoningSplitter::Parts parts = reasoning_.push(text);
    d.reasoning = parts.reasoning;
    d.content = filter_.push(parts.content);
    if (filter_.stopped()) {
      stopped_ = true;
      stop_sequence_ = filter_.matched();
    } else if (capture_) {
      feed_calls(d, /*all=*/false);
    }
    return d;
  }

  ReplyDelta finish(std::string_view text, bool cut) override {
    ReplyDelta d;
    // What the splitter still holds, through the stop filter, then what the filter held.
    ReasoningSplitter::Parts tail = reasoning_.push(text);
    const ReasoningSplitter::Parts last = reasoning_.finish();
    tail.reasoning += last.reasoning;
    tail.content += last.content;
    d.reasoning = std::move(tail.reasoning);
    if (!filter_.stopped()) {
      d.content = filter_.push(tail.content);
      if (!filter_.stopped()) d.content += filter_.finish();
    }
    if (filter_.stopped() && !stopped_) {
      stopped_ = true;
      stop_sequence_ = filter_.matched();
    }
    if (!capture_ || filter_.captured().empty()) return d;
    feed_calls(d, /*all=*/true);
    ToolCallsFinal f = calls_reader_->finish(cut);
    for (ToolCallDelta& x : f.deltas) d.tool_calls.push_back(std::move(x));
    if (f.tool_calls.empty()) {
      // No call: what was captured stays text (a marker that did not parse), except a block the
      // generation cut off.
      d.content += f.content;
    } else {
      calls_.tool_calls = std::move(f.tool_calls);
      calls_.content = std::move(f.content);
      // note: calls whose syntax is whole are the answer even when max_tokens took only their
      // closing tag; a call cut off inside (dropped) makes the reply "length": its clients must
      // not take a turn that lost a call for a finished one.
      ends_in_calls_ = !f.dropped;
    }
    return d;
  }

 private:
  // Feeds what the stop filter captured since the last call (all of it when `all`) to the
  // tool-call reader, at whole UTF-8 characters.
  void feed_calls(ReplyDelta& d, bool all) {
    const std::string& cap = filter_.captured();
    size_t end = cap.size();
    if (!all) {
      end = end > holdback_ ? end - holdback_ : 0;
      while (end > fed_ && end < cap.size() &&
             (static_cast<unsigned char>(cap[end]) & 0xC0) == 0x80)
        --end;
    }
    if (end <= fed_) return;
    for (ToolCallDelta& c : calls_reader_->push(std::string_view(cap).substr(fed_, end - fed_)))
      d.tool_calls.push_back(std::move(c));
    fed_ = end;
  }

  ReasoningSplitter reasoning_;
  StopFilter filter_;
  std::unique_ptr<ToolCallReader> calls_reader_;
  bool capture_ = false;
  size_t holdback_ = 0;
  size_t fed_ = 0;  // bytes of filter_.captured() given to calls_reader_
};

class HarmonyReplyReader final : public ReplyReader {
 public:
  explicit HarmonyReplyReader(const ReplyOptions& o) : reader_(o.header), filter_(o.stop) {}

  bool reads_special_tokens() const override { return true; }

  ReplyDelta push(std::string_view text) override {
    ReplyDelta d;
    if (stopped_) return d;
    ReplyParts parts = reader_.push(text);
    take(parts, d);
    return d;
  }

  ReplyDelta finish(std::string_view text, bool cut) override {
    ReplyDelta d;
    ReplyParts a = reader_.push(text);
    take(a, d);
    ReplyParts b = reader_.finish(cut);
    take(b, d);
    if (!filter_.stopped()) {
      const std::string rest = filter_.finish();
      d.content += rest;
      content_ += rest;
    }
    if (!reader_.calls().empty()) {
      calls_.tool_calls = reader_.calls();
      calls_.content = content_;
      ends_in_calls_ = !reader_.dropped();
    }
    return d;
  }

 private:
  void take(ReplyParts& parts, ReplyDelta& d) {
    d.reasoning += parts.reasoning;
    for (ToolCallDelta& x : parts.calls) d.tool_calls.push_back(std::move(x));
    if (filter_.stopped()) return;
    const std::string shown = filter_.push(parts.content);
    d.content += shown;
    content_ += shown;
    if (filter_.stopped()) {
      stopped_ = true;
      stop_sequence_ = filter_.matched();
    }
  }

  HarmonyReader reader_;
  StopFilter filter_;
  std::string content_;  // the answer released so far
};

}  // namespace

std::unique_ptr<ReplyReader> tagged_reply_reader(const ChatFormat& format,
                                                 const ReplyOptions& options) {
  return std::make_unique<TaggedReplyReader>(format, options);
}

std::unique_ptr<ReplyReader> harmony_reply_reader(const ReplyOptions& options) {
  return std::make_unique<HarmonyReplyReader>(options);
}

}  // namespace fak::chat
