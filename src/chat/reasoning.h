// Reasoning apart from the answer: thinking models (Qwen3, QwQ, DeepSeek-R1 style) write
// "<think> ... </think>" before their answer, and clients expect the two apart
// (`reasoning_content`, Anthropic thinking blocks). Text is released as it streams, except a
// possible partial tag at the end, held until the next piece tells.
#pragma once

#include <string>
#include <string_view>

namespace fak::chat {

class ReasoningSplitter {
 public:
  struct Parts {
    std::string reasoning, content;
  };
  // Disabled: everything is content. inside: the prompt already opened the block (a template
  // whose generation prompt ends with "<think>"), so the output starts as reasoning; otherwise a
  // block is recognised only at the very start of the output (after whitespace).
  ReasoningSplitter(bool enabled, bool inside);

  Parts push(std::string_view text);
  Parts finish();  // what was held back: an unclosed block stays reasoning

 private:
  enum class State { Start, Reasoning, Content };
  State state_;
  std::string held_;
};

inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";

// Whether a rendered prompt leaves its reply inside an open <think> block.
bool prompt_opens_reasoning(std::string_view prompt);

}  // namespace fak::chat
