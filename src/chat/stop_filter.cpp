#include "chat/stop_filter.h"

#include <algorithm>

namespace fak::chat {

StopFilter::StopFilter(std::vector<std::string> stops, std::string capture_marker,
                       bool marker_at_start)
    : stops_(std::move(stops)),
      marker_(std::move(capture_marker)),
      marker_at_start_(marker_at_start) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

size_t StopFilter::holdback() const {
  size_t keep = 0;
  auto consider = [&](const std::string& pattern) {
    // note: a match of a proper prefix of the pattern at the end; the full pattern was searched.
    for (size_t k = std::min(pattern.size() - 1, held_.size()); k > keep; --k)
      if (held_.compare(held_.size() - k, k, pattern, 0, k) == 0) {
        keep = k;
        break;
      }
  };
  for (const std::string& s : stops_) consider(s);
  if (!marker_.empty() && !capturing_) consider(marker_);
  return keep;
}

std::string StopFilter::push(std::string_view text) {
  if (stopped_) return "";
  std::string& buf = capturing_ ? captured_ : held_;
  const size_t searched_from = buf.size();
  buf.append(text);
  // A stop string can only end inside the new text; it may begin in what was held back.
  for (const std::string& s : stops_) {
    size_t from = searched_from >= s.size() ? searched_from - s.size() + 1 : 0;
    size_t at = buf.find(s, from);
    if (at == std::string::npos) continue;
    // note: each later match found is earlier in the text (the buffer was cut at the one before),
    // so the last one recorded is the one the text stops at.
    buf.resize(at);
    matched_ = s;
    stopped_ = true;
  }
  if (stopped_) {
    if (capturing_) return "";
    std::string out = std::move(held_);
    held_.clear();
    return out;
  }
  if (capturing_) return "";
  if (!marker_.empty() && marker_at_start_) {
    // Only the reply's first non-space text can open a call: wait for it, then decide once.
    const size_t first = held_.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return "";
    if (held_.compare(first, marker_.size(), marker_) == 0) {
      capturing_ = true;
      captured_ = held_.substr(first);
      held_.clear();
      return "";
    }
    if (held_.size() - first >= marker_.size() ||
        marker_.compare(0, held_.size() - first, held_, first) != 0)
      marker_.clear();  // the reply is text: nothing to capture
  }
  if (!marker_.empty() && !marker_at_start_) {
    size_t at = held_.find(marker_);
    if (at != std::string::npos) {
      capturing_ = true;
      captured_ = held_.substr(at);
      std::string out = held_.substr(0, at);
      held_.clear();
      return out;
    }
  }
  const size_t keep = holdback();
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopFilter::finish() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace fak::chat
