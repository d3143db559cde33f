// One sequence's run: the decode loop's decisions in one place, for `fak run` / `fak chat`
// (generate) and the server's batch loop (Scheduler::step) alike. The caller owns the forward:
//
//   SequenceRun run(options, index);
//   for (;;) {
//     const int base = session.size();
//     SequenceRun::Step step = run.plan(session, draft_limit);  // the token, maybe a draft
//     if (step.token) output(*step.token);
//     if (!step.finish.empty()) break;                        // stop id, grammar end, length
//     append step.append (one forward; every row's logits when step.verifies())
//     SequenceRun::Committed c = run.commit(session, step, base, rows);
//     output(c.tokens...);
//     if (!c.finish.empty()) break;
//   }
//
// plan chooses the next token with the sequence's SequenceDecoder (sampler, grammar, a thinking
// model's free reasoning block, the reasoning budget, stop ids) from the session's logits, or
// takes the one a verify left pending; it decides whether the run ends there (a stop id, a grammar
// that admits nothing more, max_tokens, the context) and, with a drafter, proposes a draft to
// verify in the same forward call. commit reads a verify's rows with the same decoder, in order:
// each row's choice is exactly what plain decoding would choose at that step (a position's logits
// do not depend on the batch, ops/matmul.h), so drafted tokens are accepted while they equal it and
// the first choice that differs is the next step's token. The output is token for token plain
// decoding's, under a grammar or a reasoning budget too, in fewer forward calls.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/sequence_decoder.h"
#include "runtime/session.h"
#include "runtime/speculative.h"

namespace fak {

struct RunOptions {
  DecodeRules rules;
  int max_tokens = 64;
  int context = 0;  // the most tokens the session may hold (0: the model's context)
  Drafter drafter;  // speculative decoding (runtime/speculative.h); empty: none
};

class SequenceRun {
 public:
  // index: the vocabulary trie a grammar needs (grammar::TokenIndex::build), null without one.
  SequenceRun(RunOptions options, std::shared_ptr<const grammar::TokenIndex> index);
  // Another choice of the same request, not yet started: the same state, its own sampler seed.
  SequenceRun(const SequenceRun& start, uint64_t seed);

  struct Step {
    std::optional<int32_t> token;  // output now (none when a stop id was chosen)
    // This step's forward input: the token, then a draft to verify. Empty when the run ends here.
    std::vector<int32_t> append;
    // Set when the run ends with this step: "stop" (a stop id, or a grammar that admits nothing
    // more) or "length" (max_tokens, or the context is full).
    std::string finish;
    // With finish: the token chosen last, not appended (the stop id, or the last one output). A
    // caller that keeps the whole reply in its session appends it.
    std::optional<int32_t> tail;
    bool verifies() const { return append.size() > 1; }
  };
  // The next step, from the session's logits at its end. draft_limit: the most drafted tokens the
  // caller allows this step (0: none).
  Step plan(const Session& session, int draft_limit);

  struct Committed {
    std::vector<int32_t> tokens;  // accepted draft tokens, output after the step's token
    std::string finish;           // "stop": a grammar completed inside them (all appended)
  };
  // After the forward appended step.append from position `base`; rows: every position's logits
  // ([append.size()][vocab]) when the step verifies a draft, else unused. The session is cut back
  // to the accepted tokens (with the logits after the last of them).
  Committed commit(Session& session, const Step& step, int base, const std::vector<float>& rows);

  // A drafter that belongs to the sequence's own state (the MTP head reads its session's hidden
  // states), set once that exists.
  void set_drafter(Drafter drafter) { options_.drafter = std::move(drafter); }

  int generated() const { return generated_; }
  bool speculates() const { return bool(options_.drafter); }
  bool has_grammar() const { return decoder_.has_grammar(); }
  // Steps that verified a draft, tokens drafted, drafted tokens accepted.
  int spec_steps() const { return spec_steps_; }
  int spec_drafted() const { return spec_drafted_; }
  int spec_accepted() const { return spec_accepted_; }

 private:
  RunOptions options_;
  SequenceDecoder decoder_;
  std::optional<SequenceDecoder::Choice> pending_;  // chosen by a verify, output next step
  int generated_ = 0;
  int spec_steps_ = 0, spec_drafted_ = 0, spec_accepted_ = 0;
  std::vector<int32_t> history_;  // scratch: the drafter's input
};

}  // namespace fak
