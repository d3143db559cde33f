#include "chat/reasoning.h"

#include <algorithm>

namespace fak::chat {

namespace {

// Length of the longest suffix of s that is a proper prefix of tag: it might complete later.
size_t partial_tag_suffix(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace

ReasoningSplitter::ReasoningSplitter(bool enabled, bool inside)
    : state_(!enabled ? State::Content
             : inside ? State::Reasoning
                      : State::Start) {}

ReasoningSplitter::Parts ReasoningSplitter::push(std::string_view text) {
  Parts out;
  held_.append(text);
  for (;;) {
    switch (state_) {
      case State::Content:
        out.content += held_;
        held_.clear();
        return out;
      case State::Start: {
        const size_t lead = held_.find_first_not_of(" \t\r\n");
        if (lead == std::string::npos) return out;  // only whitespace so far
        const std::string_view rest = std::string_view(held_).substr(lead);
        if (rest.size() < kThinkOpen.size() && kThinkOpen.substr(0, rest.size()) == rest)
          return out;  // "<thi": wait
        if (rest.substr(0, kThinkOpen.size()) == kThinkOpen) {
          held_.erase(0, lead + kThinkOpen.size());
          state_ = State::Reasoning;
        } else {
          state_ = State::Content;
        }
        continue;
      }
      case State::Reasoning: {
        const size_t close = held_.find(kThinkClose);
        if (close == std::string::npos) {
          const size_t keep = partial_tag_suffix(held_, kThinkClose);
          out.reasoning += held_.substr(0, held_.size() - keep);
          held_.erase(0, held_.size() - keep);
          return out;
        }
        out.reasoning += held_.substr(0, close);
        held_.erase(0, close + kThinkClose.size());
        // The answer starts after the blank line templates put there.
        const size_t body = held_.find_first_not_of("\r\n");
        held_.erase(0, body == std::string::npos ? held_.size() : body);
        state_ = State::Content;
        continue;
      }
    }
  }
}

ReasoningSplitter::Parts ReasoningSplitter::finish() {
  Parts out;
  if (state_ == State::Reasoning)
    out.reasoning = std::move(held_);
  else
    out.content = std::move(held_);
  held_.clear();
  state_ = State::Content;
  return out;
}

bool prompt_opens_reasoning(std::string_view prompt) {
  const size_t open = prompt.rfind(kThinkOpen);
  if (open == std::string_view::npos) return false;
  const size_t close = prompt.rfind(kThinkClose);
  return close == std::string_view::npos || close < open;
}

}  // namespace fak::chat
