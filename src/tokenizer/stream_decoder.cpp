// StreamDecoder: whole UTF-8 characters out of a stream of token ids; see tokenizer.h.
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace fak {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer),
      skip_special_(skip_special),
      strip_(tokenizer.spec().strip_leading) {}

std::string StreamDecoder::push(int32_t id) {
  if (skip_special_ && tokenizer_.is_special(id)) return {};
  pending_ += tokenizer_.token_bytes(id);
  // The stream's front as Tokenizer::decode cuts it (a Strip decoder's leading spaces).
  while (strip_ > 0 && !pending_.empty() && pending_[0] == ' ') {
    pending_.erase(0, 1);
    --strip_;
  }
  if (!pending_.empty()) strip_ = 0;
  return take_complete_utf8(pending_, false);
}

std::string StreamDecoder::flush() {
  return take_complete_utf8(pending_, true);
}

}  // namespace fak
