// GrammarMatcher: one sequence's grammar state (a stack set), advanced by tokens or bytes, and
// asked for its token mask; plus applying a mask to logits. See grammar.h.
#include <algorithm>
#include <limits>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/stack_set.h"
#include "grammar/token_mask.h"

namespace fak::grammar {

struct GrammarMatcher::Impl {
  std::shared_ptr<const Grammar> grammar;
  std::shared_ptr<const TokenIndex> index;
  std::vector<int32_t> stop_ids;
  StackSet state;
  bool terminated = false;
  // The id of each special token the grammar writes (Grammar::special_tokens), by index.
  std::vector<int32_t> special_ids;
  // Scratch, rebuilt on copy: a matcher is used by one thread at a time.
  mutable Machine machine;
  mutable StackSet next, probe;
  mutable std::unique_ptr<MaskBuilder> masks;  // made on first use

  Impl(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenIndex> i,
       std::vector<int32_t> stops)
      : grammar(std::move(g)), index(std::move(i)), stop_ids(std::move(stops)), machine(*grammar) {
    machine.start(state);
    if (!index) return;
    for (const std::string& text : grammar->special_tokens) {
      int32_t id = -1;
      for (const auto& [bytes, special] : index->impl().specials)
        if (bytes == text) id = special;
      check(id >= 0, "grammar: the tokenizer has no special token '" + text + "'");
      special_ids.push_back(id);
    }
  }
  Impl(const Impl& other)
      : grammar(other.grammar),
        index(other.index),
        stop_ids(other.stop_ids),
        state(other.state),
        terminated(other.terminated),
        special_ids(other.special_ids),
        machine(*grammar) {}

  bool is_complete() const {
    if (terminated) return false;
    machine.advance(state, kEndOfInput, probe);
    return !probe.dead();
  }

  // The index of `id` among the grammar's special tokens, or -1.
  int special_index(int32_t id) const {
    for (size_t k = 0; k < special_ids.size(); ++k)
      if (special_ids[k] == id) return int(k);
    return -1;
  }
  static std::string special_bytes(size_t k) {
    return std::string{char(kSpecialTokenByte), char(uint8_t(k))};
  }

  bool is_stop(int32_t id) const {
    return std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
  }

  // Whether `bytes` can be taken now; on true, `probe` holds the state after them.
  bool accepts(std::string_view bytes) const {
    if (terminated) return false;
    probe = state;
    for (unsigned char byte : bytes) {
      machine.advance(probe, byte, next);
      if (next.dead()) return false;
      std::swap(probe, next);
    }
    return true;
  }

  bool advance_bytes(std::string_view bytes) {
    if (!accepts(bytes)) return false;
    std::swap(state, probe);
    return true;
  }
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar,
                               std::shared_ptr<const TokenIndex> index,
                               std::vector<int32_t> stop_ids) {
  check(grammar != nullptr, "GrammarMatcher: no grammar");
  impl_ = std::make_unique<Impl>(std::move(grammar), std::move(index), std::move(stop_ids));
}

GrammarMatcher::GrammarMatcher(const GrammarMatcher& other)
    : impl_(std::make_unique<Impl>(*other.impl_)) {}
GrammarMatcher& GrammarMatcher::operator=(const GrammarMatcher& other) {
  if (this != &other) impl_ = std::make_unique<Impl>(*other.impl_);
  return *this;
}
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;
GrammarMatcher::~GrammarMatcher() = default;

void GrammarMatcher::allowed_tokens(std::vector<uint32_t>& mask) const {
  Impl& m = *impl_;
  check(m.index != nullptr, "GrammarMatcher: token masks need a TokenIndex");
  const TokenIndex::Impl& index = m.index->impl();
  mask.assign(mask_words(index.vocab), 0);
  if (m.terminated) return;
  if (!m.masks) m.masks = std::make_unique<MaskBuilder>(*m.grammar, index);
  m.masks->fill(m.state, mask);
  for (size_t k = 0; k < m.special_ids.size(); ++k)
    if (m.accepts(Impl::special_bytes(k)))
      mask[uint32_t(m.special_ids[k]) >> 5] |= 1u << (uint32_t(m.special_ids[k]) & 31);
  // A stop id means "stop" even when it is an ordinary token too (advance_token reads it so).
  const bool complete = m.is_complete();
  for (int32_t id : m.stop_ids) {
    if (id < 0 || id >= index.vocab) continue;
    const uint32_t bit = 1u << (uint32_t(id) & 31);
    mask[uint32_t(id) >> 5] =
        complete ? mask[uint32_t(id) >> 5] | bit : mask[uint32_t(id) >> 5] & ~bit;
  }
}

bool GrammarMatcher::advance_token(int32_t id) {
  Impl& m = *impl_;
  check(m.index != nullptr, "GrammarMatcher: tokens need a TokenIndex");
  if (m.terminated) return false;
  if (m.is_stop(id)) {
    if (!m.is_complete()) return false;
    m.terminated = true;
    return true;
  }
  if (const int k = m.special_index(id); k >= 0) return m.advance_bytes(Impl::special_bytes(k));
  const TokenIndex::Impl& index = m.index->impl();
  if (id < 0 || id >= index.vocab || !index.in_trie[size_t(id)]) return false;
  return m.advance_bytes(index.token_bytes[size_t(id)]);
}

bool GrammarMatcher::advance_bytes(std::string_view bytes) {
  return impl_->advance_bytes(bytes);
}

bool GrammarMatcher::is_complete() const {
  return impl_->is_complete();
}

bool GrammarMatcher::can_continue() const {
  const Impl& m = *impl_;
  if (m.terminated) return false;
  // Every byte is a token of a byte-level vocabulary, so "some byte" is "some token".
  for (int byte = 0; byte < 256; ++byte) {
    m.machine.advance(m.state, byte, m.probe);
    if (!m.probe.dead()) return true;
  }
  return false;
}

bool GrammarMatcher::is_terminated() const {
  return impl_->terminated;
}

void GrammarMatcher::reset() {
  impl_->terminated = false;
  impl_->machine.start(impl_->state);
}

void apply_token_mask(std::span<float> logits, std::span<const uint32_t> mask) {
  const float minus_inf = -std::numeric_limits<float>::infinity();
  for (size_t base = 0; base < logits.size(); base += 32) {
    const uint32_t word = base / 32 < mask.size() ? mask[base / 32] : 0u;
    if (word == ~0u) continue;
    const size_t n = std::min<size_t>(32, logits.size() - base);
    for (size_t j = 0; j < n; ++j)
      if (!((word >> j) & 1u)) logits[base + j] = minus_inf;
  }
}

bool grammar_matches(const Grammar& grammar, std::string_view text) {
  Machine machine(grammar);
  StackSet state, next;
  machine.start(state);
  for (unsigned char byte : text) {
    machine.advance(state, byte, next);
    if (next.dead()) return false;
    std::swap(state, next);
  }
  machine.advance(state, kEndOfInput, next);
  return !next.dead();
}

}  // namespace fak::grammar
