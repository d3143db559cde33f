// Tool calls as they are generated; see tool_call_stream.h.
#include "chat/tool_call_stream.h"

#include "chat/tool_calls.h"
#include "core/object_id.h"

namespace fak::chat {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

std::string trim(std::string_view s) {
  const char* ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return "";
  return std::string(s.substr(b, s.find_last_not_of(ws) - b + 1));
}

// How a piece of the expected shape compares with the text read so far.
enum class Match { Yes, More, No };

// A cursor over buf for the fixed parts of a block: `{"name": "<name>", "arguments": ` before
// the arguments and `}` + `</tool_call>` after them.
struct Cursor {
  std::string_view buf;
  size_t at;
  void spaces() {
    while (at < buf.size() && is_space(buf[at])) ++at;
  }
  Match literal(std::string_view s) {
    spaces();
    const size_t n = std::min(s.size(), buf.size() - at);
    if (buf.compare(at, n, s, 0, n) != 0) return Match::No;
    if (n < s.size()) return Match::More;
    at += s.size();
    return Match::Yes;
  }
  // A JSON string, unescaped into out.
  Match string(std::string& out) {
    spaces();
    if (at >= buf.size()) return Match::More;
    if (buf[at] != '"') return Match::No;
    bool escaped = false;
    for (size_t i = at + 1; i < buf.size(); ++i) {
      if (escaped) {
        escaped = false;
      } else if (buf[i] == '\\') {
        escaped = true;
      } else if (buf[i] == '"') {
        const ojson s = ojson::parse(buf.substr(at, i + 1 - at), nullptr, false);
        if (s.is_discarded() || !s.is_string()) return Match::No;
        out = s.get<std::string>();
        at = i + 1;
        return Match::Yes;
      }
    }
    return Match::More;
  }
};

}  // namespace

std::vector<ToolCallDelta> ToolCallStream::push(std::string_view text) {
  buf_.append(text);
  std::vector<ToolCallDelta> out;
  run(out);
  return out;
}

void ToolCallStream::close_block(size_t end) {
  pos_ = end;
  state_ = State::Outside;
}

void ToolCallStream::run(std::vector<ToolCallDelta>& out) {
  const std::string_view buf(buf_);
  for (;;) {
    switch (state_) {
      case State::Outside: {
        const size_t open = buf.find(kToolCallOpen, pos_);
        if (open == std::string_view::npos) {
          // Text up to a possible beginning of the next tag is outside any block.
          size_t keep = 0;
          for (size_t k = std::min(kToolCallOpen.size() - 1, buf.size() - pos_); k > 0; --k)
            if (buf.compare(buf.size() - k, k, kToolCallOpen, 0, k) == 0) {
              keep = k;
              break;
            }
          outside_.append(buf.substr(pos_, buf.size() - keep - pos_));
          pos_ = buf.size() - keep;
          return;
        }
        outside_.append(buf.substr(pos_, open - pos_));
        block_ = open;
        pos_ = open + kToolCallOpen.size();
        state_ = State::Head;
        break;
      }
      case State::Head: {
        Cursor c{buf, pos_};
        std::string name;
        Match m = c.literal("{");
        if (m == Match::Yes) m = c.literal("\"name\"");
        if (m == Match::Yes) m = c.literal(":");
        if (m == Match::Yes) m = c.string(name);
        if (m == Match::Yes) m = c.literal(",");
        if (m == Match::Yes) m = c.literal("\"arguments\"");
        if (m == Match::Yes) m = c.literal(":");
        if (m == Match::Yes) m = c.literal("{");
        if (m == Match::More) return;
        if (m == Match::No) {
          state_ = State::Skip;  // another shape: parsed whole once the block is complete
          break;
        }
        args_ = sent_ = c.at - 1;  // the arguments' opening brace
        depth_ = 0;
        in_string_ = escaped_ = false;
        pos_ = args_;
        calls_.push_back({new_object_id("call_"), name, "", false});
        out.push_back({int(calls_.size()) - 1, calls_.back().id, name, ""});
        state_ = State::Arguments;
        break;
      }
      case State::Arguments: {
        size_t i = pos_;
        bool done = false;
        for (; i < buf.size() && !done; ++i) {
          const char ch = buf[i];
          if (in_string_) {
            if (escaped_)
              escaped_ = false;
            else if (ch == '\\')
              escaped_ = true;
            else if (ch == '"')
              in_string_ = false;
          } else if (ch == '"') {
            in_string_ = true;
          } else if (ch == '{' || ch == '[') {
            ++depth_;
          } else if (ch == '}' || ch == ']') {
            done = --depth_ == 0;
          }
        }
        if (i > sent_) {
          out.push_back(
              {int(calls_.size()) - 1, "", "", std::string(buf.substr(sent_, i - sent_))});
          sent_ = i;
        }
        pos_ = i;
        if (!done) return;
        calls_.back().arguments = std::string(buf.substr(args_, i - args_));
        calls_.back().complete = true;
        state_ = State::Tail;
        break;
      }
      case State::Tail: {
        Cursor c{buf, pos_};
        Match m = c.literal("}");
        if (m == Match::Yes) m = c.literal(kToolCallClose);
        if (m == Match::More) return;
        if (m == Match::Yes) {
          close_block(c.at);
          break;
        }
        state_ = State::Skip;  // the call stands; what follows it up to the tag is dropped
        break;
      }
      case State::Skip: {
        const size_t close = buf.find(kToolCallClose, pos_);
        const size_t reopen = buf.find(kToolCallOpen, pos_);
        const bool announced = !calls_.empty() && args_ > block_;
        if (reopen != std::string_view::npos &&
            (close == std::string_view::npos || reopen < close)) {
          // A new block before this one's end tag: this one ended where the next begins.
          if (!announced)
            bodies_.push_back({std::string(buf.substr(block_ + kToolCallOpen.size(),
                                                      reopen - block_ - kToolCallOpen.size())),
                               outside_.size()});
          close_block(reopen);
          break;
        }
        if (close == std::string_view::npos) return;
        if (!announced)
          bodies_.push_back({std::string(buf.substr(block_ + kToolCallOpen.size(),
                                                    close - block_ - kToolCallOpen.size())),
                             outside_.size()});
        close_block(close + kToolCallClose.size());
        break;
      }
    }
  }
}

ToolCallStream::Final ToolCallStream::finish(bool cut) {
  Final f;
  const std::string_view buf(buf_);
  const bool announced = !calls_.empty() && args_ > block_;
  switch (state_) {
    case State::Outside:
      outside_.append(buf.substr(pos_));
      break;
    case State::Arguments:
      // Cut off inside its arguments: announced, never finished. It goes, text and all.
      calls_.pop_back();
      f.dropped = true;
      break;
    case State::Tail:
      break;  // whole arguments, only the closing tag missing: a call
    case State::Head:
    case State::Skip:
      if (announced && state_ == State::Skip) break;
      // An unterminated block: a call if its JSON is whole (extract_tool_calls' rule); else it
      // stays text, unless the generation was cut off inside it.
      bodies_.push_back({std::string(buf.substr(block_ + kToolCallOpen.size())), outside_.size()});
      break;
  }
  const bool unterminated = state_ == State::Head || (state_ == State::Skip && !announced);
  for (const Call& c : calls_)
    f.tool_calls.push_back({{"id", c.id},
                            {"type", "function"},
                            {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  // Blocks that do not parse go back into the text where they stood (last first, so the earlier
  // positions hold).
  std::vector<std::pair<size_t, std::string>> text_blocks;
  for (size_t i = 0; i < bodies_.size(); ++i) {
    ojson call;
    if (parse_tool_call_body(trim(bodies_[i].text), call)) {
      call["id"] = new_object_id("call_");
      f.deltas.push_back({int(f.tool_calls.size()), call["id"].get<std::string>(),
                          call["function"]["name"].get<std::string>(),
                          call["function"]["arguments"].get<std::string>()});
      f.tool_calls.push_back(std::move(call));
      continue;
    }
    const bool last = i + 1 == bodies_.size();
    if (last && unterminated && cut) {
      f.dropped = true;  // half a tool call is not an answer, nor text
      continue;
    }
    std::string text = std::string(kToolCallOpen) + bodies_[i].text;
    if (!(last && unterminated)) text += kToolCallClose;
    text_blocks.emplace_back(bodies_[i].at, std::move(text));
  }
  for (auto it = text_blocks.rbegin(); it != text_blocks.rend(); ++it)
    outside_.insert(it->first, it->second);
  f.content = f.tool_calls.empty() ? outside_ : trim(outside_);
  return f;
}

}  // namespace fak::chat
