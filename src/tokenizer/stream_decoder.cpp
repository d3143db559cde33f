// StreamDecoder: whole UTF-8 characters out of a stream of token ids; see tokenizer.h.
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace fak {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// HF decodes into a String with from_utf8_lossy: invalid sequences become U+FFFD.
std::string lossy(std::string bytes) {
  return take_complete_utf8(bytes, true);
}

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string StreamDecoder::push(int32_t id) {
  if (skip_special_ && tokenizer_.is_special(id)) return {};
  if (prefix_.empty() && !ids_.empty()) {
    std::string p = lossy(tokenizer_.decode(ids_));
    if (!p.ends_with(kReplacement)) {
      prefix_ = std::move(p);
      prefix_index_ = ids_.size();
    }
  }
  ids_.push_back(id);
  const std::string text = lossy(tokenizer_.decode(ids_));
  // note: a text that ends in U+FFFD waits for the bytes that complete its last character.
  if (text.size() <= prefix_.size() || text.ends_with(kReplacement) || !text.starts_with(prefix_))
    return {};
  std::string out = text.substr(prefix_.size());
  const size_t new_prefix_index = ids_.size() - prefix_index_;
  ids_.erase(ids_.begin(), ids_.begin() + ptrdiff_t(prefix_index_));
  prefix_ = lossy(tokenizer_.decode(ids_));
  prefix_index_ = new_prefix_index;
  return out;
}

std::string StreamDecoder::flush() {
  const std::string text = lossy(tokenizer_.decode(ids_));
  std::string out = text.size() > prefix_.size() && text.starts_with(prefix_)
                        ? text.substr(prefix_.size())
                        : std::string();
  ids_.clear();
  prefix_.clear();
  prefix_index_ = 0;
  return out;
}

}  // namespace fak
