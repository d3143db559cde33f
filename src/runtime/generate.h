// The decode loop: choose the next token from the session's logits (runtime/sequence_decoder.h,
// the same per-sequence decoding as the server's batch loop), append, repeat until max_tokens, an
// end token, a finished grammar, or the callback says stop. Used by `fak run` and `fak chat`.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "runtime/sampler.h"
#include "runtime/session.h"

namespace fak {

// Proposes up to max_tokens tokens to follow `history` (speculative decoding:
// runtime/speculative.h; ngram_drafter is the one fak ships).
using Drafter =
    std::function<std::vector<int32_t>(std::span<const int32_t> history, int max_tokens)>;

struct GenerateOptions {
  int max_tokens = 64;
  SamplingOptions sampling;
  std::vector<int32_t> stop_ids;  // end tokens (e.g. the model's eos ids); empty = never stop early
  // Append the final sampled token to the session too (so it holds the whole text). Benchmarks
  // turn it off: that last forward produces logits nobody reads.
  bool append_last = true;
  // Speculative decoding (runtime/speculative.h): same output, fewer forward calls. Empty = off;
  // on models where it would not be exact, generate() decodes plainly and says why in spec_off.
  Drafter drafter;
  // Constrained decoding (grammar/grammar.h): every token keeps the output a prefix of the
  // grammar, and a complete output ends the generation. Needs the model's tokenizer.
  std::shared_ptr<const grammar::Grammar> grammar;
};

struct GenerateResult {
  std::vector<int32_t> ids;
  std::string finish_reason;  // "length", "stop" (end token), "callback"
  double seconds = 0;
  int forward_calls = 0;  // decode forward calls (plain: one per appended token)
  // Speculative decoding: steps that verified a draft, tokens drafted, drafted tokens accepted.
  int spec_steps = 0, spec_drafted = 0, spec_accepted = 0;
  std::string spec_off;  // why a drafter was set but not used ("" otherwise)
};

// on_token returns false to stop (the token it saw is kept). An end token is not appended.
GenerateResult generate(Session& session, const GenerateOptions& options,
                        const std::function<bool(int32_t)>& on_token = {});

// End tokens a model declares: config eos ids plus the tokenizer's eos.
std::vector<int32_t> model_stop_ids(const Model& model);

}  // namespace fak
