#include "runtime/sequence_run.h"

#include <algorithm>

#include "core/error.h"

namespace fak {

SequenceRun::SequenceRun(RunOptions options, std::shared_ptr<const grammar::TokenIndex> index)
    : options_(std::move(options)), decoder_(options_.rules, std::move(index)) {}

SequenceRun::SequenceRun(const SequenceRun& start, uint64_t seed)
    : options_(start.options_), decoder_(start.decoder_, seed) {
  check(start.generated_ == 0, "SequenceRun: a choice is copied before it starts");
}

SequenceRun::Step SequenceRun::plan(const Session& s, int draft_limit) {
  Step step;
  const int context = options_.context > 0 ? options_.context : s.model().config().context_limit();
  if (generated_ >= options_.max_tokens) {
    step.finish = "length";
    return step;
  }
  const SequenceDecoder::Choice c =
      pending_ ? *pending_ : decoder_.next(s.sampleable_logits(), s.tokens());
  pending_.reset();
  step.tail = c.token;
  if (c.stop) {
    step.finish = "stop";
    return step;
  }
  ++generated_;
  step.token = c.token;
  // A complete grammar that admits nothing more ends it (with no stop id to sample, e.g. under
  // ignore_eos, the mask would be empty); so do max_tokens and a full context.
  if (decoder_.grammar_finished()) {
    step.finish = "stop";
    return step;
  }
  if (generated_ >= options_.max_tokens || s.size() + 1 > context) {
    step.finish = "length";
    return step;
  }
  step.tail.reset();
  step.append.push_back(c.token);
  if (options_.drafter && draft_limit > 0) {
    // The draft leaves room for one more chosen token under max_tokens and the context, so the
    // last token is output without being appended, as plain decoding does.
    const int room =
        std::min({options_.max_tokens - generated_ - 1, context - s.size() - 2, draft_limit});
    if (room > 0) {
      history_.assign(s.tokens().begin(), s.tokens().end());
      history_.push_back(c.token);
      std::vector<int32_t> draft = options_.drafter(history_, room);
      if (int(draft.size()) > room) draft.resize(size_t(room));
      step.append.insert(step.append.end(), draft.begin(), draft.end());
    }
  }
  return step;
}

SequenceRun::Committed SequenceRun::commit(Session& s, const Step& step, int base,
                                           const std::vector<float>& rows) {
  Committed out;
  if (!step.verifies()) return out;
  const std::span<const int32_t> draft = std::span<const int32_t>(step.append).subspan(1);
  // Each row chosen by the sequence's own decoder, in order: its grammar, reasoning block and
  // budget advance exactly as plain decoding's would through the same tokens.
  const Verified v = accept_rows(
      s, base, draft, rows, [&](std::span<const float> logits, std::span<const int32_t> history) {
        const SequenceDecoder::Choice c = decoder_.next(logits, history);
        return RowChoice{c.token, c.stop, !c.stop && decoder_.grammar_finished()};
      });
  ++spec_steps_;
  spec_drafted_ += v.drafted;
  spec_accepted_ += int(v.accepted.size());
  generated_ += int(v.accepted.size());
  out.tokens = v.accepted;
  if (v.ended)
    out.finish = "stop";
  else
    pending_ = SequenceDecoder::Choice{v.next.token, v.next.stop};
  return out;
}

}  // namespace fak
