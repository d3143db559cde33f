// Building the vocabulary trie once per tokenizer, and the shared mask-part cache; see
// token_index.h.
#include "grammar/token_index.h"

#include <algorithm>
#include <atomic>

#include "core/error.h"
#include "grammar/step.h"
#include "grammar/token_mask.h"
#include "tokenizer/tokenizer.h"

namespace fak::grammar {

std::shared_ptr<const TokenIndex> TokenIndex::build(const Tokenizer& tokenizer) {
  auto impl = std::make_unique<Impl>();
  const int32_t vocab = tokenizer.vocab_size();
  impl->vocab = vocab;
  static std::atomic<uint64_t> next_uid{1};
  impl->uid = next_uid.fetch_add(1);
  impl->token_bytes.resize(size_t(vocab));
  impl->in_trie.assign(size_t(vocab), 0);
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab; ++id) {
    impl->token_bytes[size_t(id)] = tokenizer.token_bytes(id);
    // Special tokens (<|im_end|>, ...) are control, not text: a grammar writes them only where it
    // names them (kSpecialTokenByte); the stop ids are added by the matcher. An empty token would
    // be allowed everywhere and loop.
    const std::string& text = impl->token_bytes[size_t(id)];
    if (tokenizer.is_special(id)) {
      if (!text.empty()) impl->specials.emplace_back(text, id);
      continue;
    }
    // Bytes F5-FF never occur in UTF-8, so a grammar's text never needs a token holding one, and
    // leaving them out keeps kSpecialTokenByte for the special tokens alone.
    if (text.empty() ||
        std::any_of(text.begin(), text.end(), [](char ch) { return uint8_t(ch) >= 0xF5; }))
      continue;
    check(impl->token_bytes[size_t(id)].size() < 256,
          "grammar: token " + std::to_string(id) + " is longer than 255 bytes");
    impl->in_trie[size_t(id)] = 1;
    ids.push_back(id);
  }
  const auto& bytes = impl->token_bytes;
  std::sort(ids.begin(), ids.end(), [&](int32_t x, int32_t y) {
    return bytes[size_t(x)] != bytes[size_t(y)] ? bytes[size_t(x)] < bytes[size_t(y)] : x < y;
  });

  // Sorted strings give the trie in preorder: each string shares a prefix with the one before,
  // closes the nodes past that prefix and opens nodes for the rest.
  std::vector<uint32_t> path;  // node index per depth - 1
  std::string previous;
  for (int32_t id : ids) {
    const std::string& s = bytes[size_t(id)];
    size_t common = 0;
    while (common < s.size() && common < previous.size() && s[common] == previous[common]) ++common;
    while (path.size() > common) {
      impl->nodes[path.back()].end = uint32_t(impl->nodes.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      TrieNode node;
      node.byte = uint8_t(s[d]);
      node.depth = uint8_t(d + 1);
      node.tokens_begin = uint32_t(impl->node_tokens.size());
      path.push_back(uint32_t(impl->nodes.size()));
      impl->nodes.push_back(node);
    }
    TrieNode& last = impl->nodes[path.back()];
    check(last.n_tokens < 255, "grammar: too many tokens with the same bytes");
    // Tokens of one node arrive together (equal strings sort next to each other, and the node was
    // opened by the first of them), so they are contiguous in node_tokens.
    ++last.n_tokens;
    impl->node_tokens.push_back(id);
    impl->longest_token = std::max<uint32_t>(impl->longest_token, uint32_t(s.size()));
    previous = s;
  }
  while (!path.empty()) {
    impl->nodes[path.back()].end = uint32_t(impl->nodes.size());
    path.pop_back();
  }
  // Inside a string almost every token is allowed, so a string state's mask part is the one
  // costly walk (~7 ms for Qwen); every grammar shares them, so they are made here once rather
  // than on some request's first string. Strings never read their grammar: an empty one will do.
  static const Grammar no_grammar;
  MaskBuilder builder(no_grammar, *impl);
  for (const Frame& frame : string_body_frames()) builder.pin_part(frame);
  return std::shared_ptr<const TokenIndex>(new TokenIndex(std::move(impl)));
}

TokenIndex::TokenIndex(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TokenIndex::~TokenIndex() = default;
int32_t TokenIndex::vocab_size() const {
  return impl_->vocab;
}

}  // namespace fak::grammar
