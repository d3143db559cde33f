// One sequence's token choice, the same for `fak run`, `fak chat` and the server (through
// SequenceRun, runtime/sequence_run.h): given the logits at its position, choose the next token
// under the sequence's rules (the sampler, a grammar with a thinking model's one free reasoning
// block, a reasoning budget, the stop ids) and keep their state. The caller runs the forward.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "grammar/grammar.h"
#include "runtime/sampler.h"

namespace fak {

// At most `tokens` tokens of reasoning (Anthropic's thinking.budget_tokens): once a <think> block
// has that many, the decoder chooses `close` itself, and the model goes on to its answer.
struct ReasoningBudget {
  int tokens = 0;
  int32_t open = -1, close = -1;  // the <think> and </think> token ids
};

// Thinking models under a constraint: the reply may begin with one reasoning block, which is
// free text; the grammar holds everywhere else, from the first token. inside: the prompt already
// opened the block (the reply starts as reasoning, constrained once `close` is sampled);
// otherwise the first token is the grammar's or `open`, and a model that does not open a block
// (an -Instruct model, /no_think, a small model) is constrained from its first token.
struct ThinkBlock {
  int32_t open = -1, close = -1;
  bool inside = false;
};

// A sequence's decoding rules.
struct DecodeRules {
  SamplingOptions sampling;
  std::vector<int32_t> stop_ids;                    // end tokens: sampling one ends the sequence
  std::shared_ptr<const grammar::Grammar> grammar;  // null: unconstrained
  std::optional<ThinkBlock> think;                  // with a grammar: the free reasoning block
  std::optional<ReasoningBudget> reasoning_budget;
  bool reasoning_open = false;  // the prompt leaves the reply inside a <think> block
};

class SequenceDecoder {
 public:
  // index: the vocabulary trie a grammar needs (grammar::TokenIndex::build), null without one.
  // Throws fak::Error for bad sampling options.
  SequenceDecoder(const DecodeRules& rules, std::shared_ptr<const grammar::TokenIndex> index);
  // Another choice of the same request: the same start state, its own sampler seed.
  SequenceDecoder(const SequenceDecoder& start, uint64_t seed);

  struct Choice {
    int32_t token = -1;
    bool stop = false;  // one of the stop ids: the sequence ends, the token is not output
  };
  // The next token from `logits` (the sampleable ones) and the tokens so far; its effect on the
  // grammar and the reasoning budget is taken at once.
  Choice next(std::span<const float> logits, std::span<const int32_t> history);
  // A grammar that is complete and admits nothing more: the sequence is over (no stop id to
  // sample, e.g. under ignore_eos, would leave an empty mask).
  bool grammar_finished() const;
  bool constrained() const { return constrained_; }
  bool has_grammar() const { return matcher_.has_value(); }

 private:
  Sampler sampler_;
  std::vector<int32_t> stop_ids_;
  std::optional<grammar::GrammarMatcher> matcher_;
  std::optional<ThinkBlock> think_;
  std::optional<ReasoningBudget> budget_;
  bool constrained_ = false;     // the matcher applies (false inside a reasoning block)
  bool may_open_think_ = false;  // the next token may also open the reasoning block
  bool reasoning_ = false;       // inside a <think> block, and how many tokens it holds
  int reasoning_tokens_ = 0;
  std::vector<uint32_t> mask_;
  std::vector<float> masked_;  // the logits with the mask applied
};

}  // namespace fak
