#include "runtime/sequence_decoder.h"

#include <algorithm>

namespace fak {

SequenceDecoder::SequenceDecoder(const DecodeRules& rules,
                                 std::shared_ptr<const grammar::TokenIndex> index)
    : sampler_(rules.sampling),
      stop_ids_(rules.stop_ids),
      think_(rules.think),
      budget_(rules.reasoning_budget) {
  if (rules.grammar) matcher_.emplace(rules.grammar, std::move(index), rules.stop_ids);
  // Constrained from the first token, unless the reply starts inside a reasoning block; a model
  // that may open one gets its opening tag allowed beside the grammar's first tokens.
  constrained_ = matcher_ && !(think_ && think_->inside);
  may_open_think_ = constrained_ && think_.has_value();
  reasoning_ = rules.reasoning_open;
}

SequenceDecoder::SequenceDecoder(const SequenceDecoder& start, uint64_t seed)
    : SequenceDecoder(start) {
  SamplingOptions o = start.sampler_.options();
  o.seed = seed;
  sampler_ = Sampler(o);
}

SequenceDecoder::Choice SequenceDecoder::next(std::span<const float> logits,
                                              std::span<const int32_t> history) {
  std::span<const float> choose_from = logits;
  if (constrained_) {
    matcher_->allowed_tokens(mask_);
    if (may_open_think_) {
      const auto open = uint32_t(think_->open);
      if (open / 32 < mask_.size()) mask_[open / 32] |= 1u << (open % 32);
    }
    masked_.assign(logits.begin(), logits.end());
    grammar::apply_token_mask(masked_, mask_);
    choose_from = masked_;
  }
  // A reasoning block that has spent its budget is closed here, not by the model.
  const bool close_reasoning = budget_ && reasoning_ && reasoning_tokens_ >= budget_->tokens;
  const int32_t next = close_reasoning ? budget_->close : sampler_.sample(choose_from, history);
  if (budget_) {
    // note: an opening tag inside the block is one more token of it: a model that repeats it
    // must not think past its budget.
    if (next == budget_->open && !reasoning_)
      reasoning_ = true;
    else if (next == budget_->close)
      reasoning_ = false;
    else if (reasoning_)
      ++reasoning_tokens_;
  }
  if (matcher_) {
    const bool opens = may_open_think_ && next == think_->open;
    may_open_think_ = false;  // only the reply's first token may open the block
    if (opens)
      constrained_ = false;  // free reasoning until the block is closed
    else if (constrained_)
      matcher_->advance_token(next);
    else if (think_ && next == think_->close)
      constrained_ = true;  // the constraint starts with the next token
  }
  const bool stop = std::find(stop_ids_.begin(), stop_ids_.end(), next) != stop_ids_.end();
  return {next, stop};
}

bool SequenceDecoder::grammar_finished() const {
  return constrained_ && matcher_->is_complete() && !matcher_->can_continue();
}

}  // namespace fak
