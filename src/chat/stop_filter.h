// Stop strings over streamed text: text is released only once no stop string can still start in
// it, so a client never sees the first half of a stop string that the next token completes. With a
// capture marker (e.g. "<tool_call>"), everything from the marker on is held for the caller to
// parse at the end instead of being streamed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fak::chat {

class StopFilter {
 public:
  // marker_at_start: the marker counts only as the text's first non-space characters (a reply
  // that is a call); once other text came, nothing is captured.
  explicit StopFilter(std::vector<std::string> stops, std::string capture_marker = "",
                      bool marker_at_start = false);

  // Feeds decoded text (whole UTF-8 characters); returns the text that is now safe to emit.
  // Once a stop string matched, stopped() is true and later input is ignored.
  std::string push(std::string_view text);
  // End of generation: returns the held text that turned out not to be a stop string.
  std::string finish();
  bool stopped() const { return stopped_; }
  // The stop string that matched (empty until one did): Anthropic reports it as stop_sequence.
  const std::string& matched() const { return matched_; }
  // Text from the capture marker on (empty when the marker never appeared).
  const std::string& captured() const { return captured_; }

 private:
  size_t holdback() const;  // length of the longest suffix of held_ that may begin a match

  std::vector<std::string> stops_;
  std::string marker_;
  std::string held_;
  std::string captured_;
  std::string matched_;
  bool capturing_ = false;
  bool stopped_ = false;
  bool marker_at_start_ = false;
};

}  // namespace fak::chat
