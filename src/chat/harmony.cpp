// Harmony replies (harmony.h): headers, channels and recipients.
#include "chat/harmony.h"

#include <array>

#include "core/object_id.h"

namespace fak::chat {

namespace {

constexpr std::string_view kMessage = "<|message|>", kChannel = "<|channel|>";
// What ends a message's body: <|end|> (another message follows), <|call|> and <|return|> (the turn
// is over), and <|start|> should a model skip the end.
constexpr std::array<std::string_view, 4> kBodyEnds = {"<|end|>", "<|call|>", "<|return|>",
                                                       "<|start|>"};

std::string_view trim(std::string_view s) {
  const char* ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// The word after `key` in a header ("analysis" after <|channel|>, "functions.f" after to=).
std::string word_after(std::string_view header, std::string_view key) {
  const size_t at = header.find(key);
  if (at == std::string_view::npos) return "";
  std::string_view rest = header.substr(at + key.size());
  size_t end = 0;
  while (end < rest.size() && rest[end] != ' ' && rest[end] != '<' && rest[end] != '\n') ++end;
  return std::string(rest.substr(0, end));
}

// Where text could still become a marker ("<|" and what follows, at the end): held back.
size_t safe_length(std::string_view text) {
  const size_t lt = text.rfind('<');
  if (lt == std::string_view::npos) return text.size();
  const std::string_view tail = text.substr(lt);
  if (tail.find('>') != std::string_view::npos) return text.size();
  return tail.size() == 1 || tail[1] == '|' ? lt : text.size();
}

}  // namespace

HarmonyReader::HarmonyReader(std::string_view header) {
  if (header.empty()) return;
  ReplyParts none;
  buf_ = std::string(header);
  run(none, /*at_end=*/false);
}

ReplyParts HarmonyReader::push(std::string_view text) {
  buf_ += text;
  ReplyParts out;
  run(out, /*at_end=*/false);
  return out;
}

ReplyParts HarmonyReader::finish(bool cut) {
  ReplyParts out;
  run(out, /*at_end=*/true);
  if (state_ == State::Body) {
    emit(buf_, out);
    buf_.clear();
    end_message(out, /*complete=*/!cut);
  } else if (!trim(buf_).empty() && buf_.find(kChannel) == std::string::npos) {
    // Text with no harmony header at all: the model answered plainly.
    out.content += buf_;
  }
  buf_.clear();
  return out;
}

void HarmonyReader::run(ReplyParts& out, bool at_end) {
  for (;;) {
    if (state_ == State::Header) {
      // The header waits whole in buf_ until its <|message|> (finish takes what never got one).
      const size_t at = buf_.find(kMessage);
      if (at == std::string::npos) return;
      const std::string_view header = std::string_view(buf_).substr(0, at);
      channel_ = word_after(header, kChannel);
      recipient_ = word_after(header, "to=");
      buf_.erase(0, at + kMessage.size());
      body_.clear();
      state_ = State::Body;
      continue;
    }
    size_t end = std::string::npos, marker = 0;
    for (std::string_view m : kBodyEnds) {
      const size_t at = buf_.find(m);
      if (at < end) {
        end = at;
        marker = m.size();
      }
    }
    if (end == std::string::npos) {
      const size_t safe = at_end ? buf_.size() : safe_length(buf_);
      emit(std::string_view(buf_).substr(0, safe), out);
      buf_.erase(0, safe);
      return;
    }
    emit(std::string_view(buf_).substr(0, end), out);
    buf_.erase(0, end + marker);
    end_message(out, /*complete=*/true);
    state_ = State::Header;
  }
}

void HarmonyReader::emit(std::string_view text, ReplyParts& out) {
  if (text.empty()) return;
  if (!recipient_.empty())
    body_ += text;
  else if (channel_ == "analysis")
    out.reasoning += text;
  else
    out.content += text;  // final, or commentary shown to the user
}

void HarmonyReader::end_message(ReplyParts& out, bool complete) {
  if (recipient_.empty()) return;
  if (!complete) {
    dropped_ = true;  // a call cut off: never an answer, never text
    recipient_.clear();
    return;
  }
  std::string name = recipient_;
  if (name.rfind("functions.", 0) == 0) name.erase(0, 10);
  const std::string_view body = trim(body_);
  std::string arguments(body);
  if (json_depth(body) <= kMaxJsonDepth) {
    ojson parsed = ojson::parse(body, nullptr, false);
    if (!parsed.is_discarded() && parsed.is_object()) arguments = parsed.dump();
  }
  ToolCallDelta d;
  d.index = int(calls_.size());
  d.id = new_object_id("call_");
  d.name = name;
  d.arguments = arguments;
  ojson call = ojson::object();
  call["id"] = d.id;
  call["type"] = "function";
  call["function"] = {{"name", name}, {"arguments", arguments}};
  calls_.push_back(std::move(call));
  out.calls.push_back(std::move(d));
  recipient_.clear();
  body_.clear();
}

}  // namespace fak::chat
