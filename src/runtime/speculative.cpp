// Prompt-lookup drafts and their verification against a Session. The contract and why it is exact
// are at the top of speculative.h; the loop is SequenceRun's (sequence_run.h).
#include "runtime/speculative.h"

#include <algorithm>

#include "core/error.h"

namespace fak {

void DraftOptions::validate() const {
  check(max_draft >= 1 && max_draft <= 64,
        "draft length must be 1 to 64, got " + std::to_string(max_draft));
  check(min_ngram >= 1 && min_ngram <= max_ngram && max_ngram <= 16,
        "draft n-gram sizes must satisfy 1 <= min <= max <= 16, got min " +
            std::to_string(min_ngram) + ", max " + std::to_string(max_ngram));
}

std::vector<int32_t> ngram_draft(std::span<const int32_t> history, const DraftOptions& o,
                                 int limit) {
  std::vector<int32_t> out;
  const int len = int(history.size());
  const int max_len = std::min(o.max_draft, limit);
  if (max_len <= 0) return out;
  // The longest suffix first: a longer match is more likely to be the span being repeated.
  for (int n = std::min(o.max_ngram, len - 1); n >= o.min_ngram; --n) {
    const int32_t* suffix = history.data() + (len - n);
    // Earlier occurrences start at j <= len - n - 1, so at least one token follows each; the most
    // recent one is what an agent rewriting what it just read is most likely repeating.
    for (int j = len - n - 1; j >= 0; --j) {
      if (!std::equal(suffix, suffix + n, history.data() + j)) continue;
      const int from = j + n, to = std::min(len, from + max_len);
      out.assign(history.begin() + from, history.begin() + to);
      return out;
    }
  }
  return out;
}

Drafter ngram_drafter(const DraftOptions& options) {
  options.validate();
  return [options](std::span<const int32_t> history, int max_tokens) {
    return ngram_draft(history, options, max_tokens);
  };
}

namespace {

bool is_stop(std::span<const int32_t> stop_ids, int32_t t) {
  return std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end();
}

}  // namespace

Verified accept_rows(Session& s, int base, std::span<const int32_t> draft,
                     const std::vector<float>& rows, const ChooseRow& choose) {
  const size_t vocab = size_t(s.model().config().vocab);
  check(rows.size() >= (1 + draft.size()) * vocab, "accept_rows: one row of logits per token");
  const size_t sampleable = std::min(vocab, size_t(s.model().sampleable_vocab()));
  Verified v;
  v.drafted = int(draft.size());
  size_t i = 0;
  for (;; ++i) {
    // The history plain decoding passes at this step: everything up to this row's token.
    const std::span<const int32_t> history(s.tokens().data(), size_t(base) + 1 + i);
    const RowChoice c = choose({rows.data() + i * vocab, sampleable}, history);
    if (i < draft.size() && c.token == draft[i] && !c.stop) {
      v.accepted.push_back(c.token);
      if (!c.ends) continue;
      v.ended = true;  // the session keeps it, with the logits after it
      ++i;
      break;
    }
    v.next = c;
    break;
  }
  const int keep = base + 1 + int(i);
  if (keep < s.size()) s.truncate(keep, {rows.data() + i * vocab, vocab});
  return v;
}

std::vector<Verified> verify_drafts(std::span<const VerifyRequest> requests) {
  std::vector<Session*> sessions;
  std::vector<std::vector<int32_t>> inputs;
  std::vector<int> bases;
  for (const VerifyRequest& r : requests) {
    check(r.session && r.sampler, "verify_draft: a request needs a session and a sampler");
    check(r.session->has_logits(), "verify_draft: the session has no logits to sample `last` from");
    // A draft running past the context is cut so that verifying never fails where plain decoding
    // would not (appending `last` itself fails exactly when plain decoding's append would).
    const int room = r.session->model().config().context_limit() - r.session->size() - 1;
    const size_t n = std::min(r.draft.size(), size_t(std::max(room, 0)));
    std::vector<int32_t> input{r.last};
    input.insert(input.end(), r.draft.begin(), r.draft.begin() + long(n));
    sessions.push_back(r.session);
    inputs.push_back(std::move(input));
    bases.push_back(r.session->size());
  }
  // note: reused across calls, so a step does not fault in (1 + k) x vocab fresh floats per
  // sequence (5 MB for Qwen's 152k vocabulary at k = 8).
  thread_local std::vector<std::vector<float>> rows;
  if (rows.size() < requests.size()) rows.resize(requests.size());
  std::vector<std::span<const int32_t>> spans;
  std::vector<std::vector<float>*> outs;
  for (size_t i = 0; i < requests.size(); ++i) {
    spans.emplace_back(inputs[i]);
    outs.push_back(&rows[i]);
  }
  append_batch(sessions, spans, outs);
  std::vector<Verified> out;
  for (size_t i = 0; i < requests.size(); ++i) {
    const VerifyRequest& r = requests[i];
    out.push_back(accept_rows(*r.session, bases[i], std::span<const int32_t>(inputs[i]).subspan(1),
                              rows[i],
                              [&](std::span<const float> logits, std::span<const int32_t> history) {
                                const int32_t t = r.sampler->sample(logits, history);
                                return RowChoice{t, is_stop(r.stop_ids, t), false};
                              }));
  }
  return out;
}

Verified verify_draft(const VerifyRequest& request) {
  return verify_drafts({&request, 1})[0];
}

}  // namespace fak
