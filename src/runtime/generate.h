// The decode loop for one session: SequenceRun's plan / append / commit (runtime/sequence_run.h,
// the same decisions as the server's batch loop) until max_tokens, an end token, a finished
// grammar, or the callback says stop; speculative when a drafter is given. Used by `fak run`,
// `fak chat` and the benchmarks.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "runtime/sampler.h"
#include "runtime/sequence_decoder.h"
#include "runtime/session.h"
#include "runtime/speculative.h"

namespace fak {

struct GenerateOptions {
  int max_tokens = 64;
  SamplingOptions sampling;
  std::vector<int32_t> stop_ids;  // end tokens (e.g. the model's eos ids); empty = never stop early
  // Append the final sampled token to the session too (so it holds the whole text). Benchmarks
  // turn it off: that last forward produces logits nobody reads.
  bool append_last = true;
  // Speculative decoding (runtime/speculative.h): the same output in fewer forward calls, under a
  // grammar and a reasoning budget too. Empty = off. max_draft: the most drafted tokens a step.
  Drafter drafter;
  int max_draft = 64;
  // Constrained decoding (grammar/grammar.h): every token keeps the output a prefix of the
  // grammar, and a complete output ends the generation. Needs the model's tokenizer.
  std::shared_ptr<const grammar::Grammar> grammar;
  // A thinking model's reply (runtime/sequence_decoder.h): the prompt left it inside a <think>
  // block, the grammar spares one reasoning block, the block's token budget.
  bool reasoning_open = false;
  std::optional<ThinkBlock> think;
  std::optional<ReasoningBudget> reasoning_budget;
};

struct GenerateResult {
  std::vector<int32_t> ids;
  std::string finish_reason;  // "length", "stop" (end token), "callback"
  double seconds = 0;
  int forward_calls = 0;  // decode forward calls (plain: one per appended token)
  // Speculative decoding: steps that verified a draft, tokens drafted, drafted tokens accepted.
  int spec_steps = 0, spec_drafted = 0, spec_accepted = 0;
};

// on_token returns false to stop (the token it saw is kept). An end token is not appended.
GenerateResult generate(Session& session, const GenerateOptions& options,
                        const std::function<bool(int32_t)>& on_token = {});

// End tokens a model declares: config eos ids plus the tokenizer's eos.
std::vector<int32_t> model_stop_ids(const Model& model);

}  // namespace fak
