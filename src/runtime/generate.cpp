#include "runtime/generate.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "runtime/sequence_run.h"
#include "tokenizer/tokenizer.h"

namespace fak {

GenerateResult generate(Session& session, const GenerateOptions& o,
                        const std::function<bool(int32_t)>& on_token) {
  check(session.has_logits(), "generate: the session is empty; append a prompt first");
  std::shared_ptr<const grammar::TokenIndex> index;
  if (o.grammar) {
    const Tokenizer* tok = session.model().tokenizer();
    check(tok != nullptr, "constrained decoding needs the model's tokenizer");
    index = grammar::TokenIndex::build(*tok);
  }
  RunOptions ro;
  ro.rules.sampling = o.sampling;
  ro.rules.stop_ids = o.stop_ids;
  ro.rules.grammar = o.grammar;
  ro.rules.think = o.think;
  ro.rules.reasoning_budget = o.reasoning_budget;
  ro.rules.reasoning_open = o.reasoning_open;
  ro.max_tokens = o.max_tokens;
  ro.drafter = o.drafter;
  SequenceRun run(std::move(ro), std::move(index));
  GenerateResult r;
  const auto t0 = std::chrono::steady_clock::now();
  // note: reused across steps, so a verify does not fault in (1 + k) x vocab fresh floats.
  std::vector<float> rows;
  for (;;) {
    const int base = session.size();
    const SequenceRun::Step step = run.plan(session, o.drafter ? o.max_draft : 0);
    if (step.token) {
      r.ids.push_back(*step.token);
      if (on_token && !on_token(*step.token)) {
        r.finish_reason = "callback";  // the token it saw is kept, not appended
        break;
      }
    }
    if (!step.finish.empty()) {
      r.finish_reason = step.finish;
      // The last token output goes into the session too (not a stop id): it then holds the
      // whole text. Benchmarks skip that forward.
      if (step.token && o.append_last) {
        session.append({&*step.token, 1});
        ++r.forward_calls;
      }
      break;
    }
    if (step.verifies()) {
      Session* s = &session;
      const std::span<const int32_t> input(step.append);
      std::vector<float>* out = &rows;
      append_batch({&s, 1}, {&input, 1}, {&out, 1});
    } else {
      session.append(step.append);
    }
    ++r.forward_calls;
    const SequenceRun::Committed c = run.commit(session, step, base, rows);
    bool refused = false;
    for (size_t i = 0; i < c.tokens.size() && !refused; ++i) {
      r.ids.push_back(c.tokens[i]);
      if (on_token && !on_token(c.tokens[i])) {
        // Plain decoding does not append the token its callback refused: drop it and what
        // followed (one forward call, once per generation).
        session.truncate(base + 1 + int(i));
        ++r.forward_calls;
        r.finish_reason = "callback";
        refused = true;
      }
    }
    if (refused) break;
    if (!c.finish.empty()) {
      r.finish_reason = c.finish;
      break;
    }
  }
  r.spec_steps = run.spec_steps();
  r.spec_drafted = run.spec_drafted();
  r.spec_accepted = run.spec_accepted();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::vector<int32_t> model_stop_ids(const Model& model) {
  std::vector<int32_t> ids = model.config().eos_ids;
  if (const Tokenizer* t = model.tokenizer())
    if (auto e = t->spec().eos_id) ids.push_back(*e);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace fak
