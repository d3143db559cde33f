#include "runtime/generate.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "runtime/sequence_decoder.h"
#include "runtime/speculative.h"
#include "tokenizer/tokenizer.h"

namespace fak {

GenerateResult generate(Session& session, const GenerateOptions& o,
                        const std::function<bool(int32_t)>& on_token) {
  check(session.has_logits(), "generate: the session is empty; append a prompt first");
  std::string spec_off;
  if (o.drafter) {
    spec_off = o.grammar ? "a grammar constrains the output: decoding token by token"
                         : speculation_unsupported(session.model());
    if (spec_off.empty()) return generate_speculative(session, o, on_token);
  }
  std::shared_ptr<const grammar::TokenIndex> index;
  if (o.grammar) {
    const Tokenizer* tok = session.model().tokenizer();
    check(tok != nullptr, "constrained decoding needs the model's tokenizer");
    index = grammar::TokenIndex::build(*tok);
  }
  DecodeRules rules;
  rules.sampling = o.sampling;
  rules.stop_ids = o.stop_ids;
  rules.grammar = o.grammar;
  SequenceDecoder decoder(rules, index);
  GenerateResult r;
  r.spec_off = spec_off;
  r.finish_reason = "length";
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.max_tokens; ++i) {
    const SequenceDecoder::Choice c = decoder.next(session.sampleable_logits(), session.tokens());
    if (c.stop) {
      r.finish_reason = "stop";
      break;
    }
    const int32_t next = c.token;
    r.ids.push_back(next);
    if (on_token && !on_token(next)) {
      r.finish_reason = "callback";
      break;
    }
    // A complete grammar that admits nothing more ends it, its last token a last one.
    const bool done = decoder.grammar_finished();
    if ((i + 1 < o.max_tokens && !done) || o.append_last) {
      session.append({&next, 1});
      ++r.forward_calls;
    }
    if (done) {
      r.finish_reason = "stop";
      break;
    }
  }
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
