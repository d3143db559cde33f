// Prompt-lookup drafts, their verification against a Session, and the speculative decode loop.
// The contract and why it is exact are at the top of speculative.h.
#include "runtime/speculative.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "runtime/sequence_decoder.h"

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

std::string speculation_unsupported(const Model&) {
  // Every model: hybrids too, since a DeltaNet state does not depend on how its tokens were grouped
  // into calls and a verify call records what drops its rejected tail (Session::truncate).
  return "";
}

namespace {

bool is_stop(std::span<const int32_t> stop_ids, int32_t t) {
  return std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end();
}

// Samples the rows of a verify call in order, accepts the agreeing draft prefix and drops the rest
// of the appended tokens. base: the session's size before the call; rows: [1 + draft][vocab].
Verified accept(const VerifyRequest& r, int base, std::span<const int32_t> draft,
                const std::vector<float>& rows) {
  Session& s = *r.session;
  const size_t vocab = size_t(s.model().config().vocab);
  const size_t sampleable = std::min(vocab, size_t(s.model().sampleable_vocab()));
  Verified v;
  v.drafted = int(draft.size());
  size_t i = 0;
  for (;; ++i) {
    // The history plain decoding passes at this step: everything up to this row's token.
    const std::span<const int32_t> history(s.tokens().data(), size_t(base) + 1 + i);
    const int32_t t = r.sampler->sample({rows.data() + i * vocab, sampleable}, history);
    if (i < draft.size() && t == draft[i] && !is_stop(r.stop_ids, t)) {
      v.accepted.push_back(t);
      continue;
    }
    v.next = t;
    break;
  }
  const int keep = base + 1 + int(i);
  if (keep < s.size()) s.truncate(keep, {rows.data() + i * vocab, vocab});
  return v;
}

}  // namespace

std::vector<Verified> verify_drafts(std::span<const VerifyRequest> requests) {
  std::vector<Session*> sessions;
  std::vector<std::vector<int32_t>> inputs;
  std::vector<int> bases;
  for (const VerifyRequest& r : requests) {
    check(r.session && r.sampler, "verify_draft: a request needs a session and a sampler");
    const std::string why = speculation_unsupported(r.session->model());
    check(why.empty(), why);
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
  for (size_t i = 0; i < requests.size(); ++i)
    out.push_back(
        accept(requests[i], bases[i], std::span<const int32_t>(inputs[i]).subspan(1), rows[i]));
  return out;
}

Verified accept_draft(const VerifyRequest& request, int base, const std::vector<float>& rows) {
  check(rows.size() == (1 + request.draft.size()) * size_t(request.session->model().config().vocab),
        "accept_draft: one row of logits per appended token");
  return accept(request, base, request.draft, rows);
}

Verified verify_draft(const VerifyRequest& request) {
  return verify_drafts({&request, 1})[0];
}

GenerateResult generate_speculative(Session& session, const GenerateOptions& o,
                                    const std::function<bool(int32_t)>& on_token) {
  check(session.has_logits(), "generate: the session is empty; append a prompt first");
  check(bool(o.drafter), "generate_speculative: no drafter");
  // The same per-sequence decoding as plain decoding and the server (runtime/sequence_decoder.h):
  // its sampler samples the verify rows, and the token sampled after an accepted draft is its
  // pending next one.
  DecodeRules rules;
  rules.sampling = o.sampling;
  rules.stop_ids = o.stop_ids;
  SequenceDecoder decoder(rules, nullptr);
  GenerateResult r;
  r.finish_reason = "length";
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> history;
  if (o.max_tokens > 0) {
    // The loop keeps plain decoding's invariant: `next` was chosen from the session's logits (or
    // is a verify's pending token) and is not yet appended.
    for (;;) {
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
      const int remaining = o.max_tokens - int(r.ids.size());
      if (remaining == 0) {
        if (o.append_last) {
          session.append({&next, 1});
          ++r.forward_calls;
        }
        break;
      }
      // At most remaining - 1 drafted tokens: if all are accepted, they and the new `next` are the
      // last tokens max_tokens allows, and nothing past them is ever appended.
      history.assign(session.tokens().begin(), session.tokens().end());
      history.push_back(next);
      std::vector<int32_t> draft = o.drafter(history, remaining - 1);
      if (int(draft.size()) > remaining - 1) draft.resize(size_t(remaining - 1));
      const int base = session.size();
      Verified v = verify_draft({&session, next, draft, &decoder.sampler(), o.stop_ids});
      ++r.forward_calls;
      if (v.drafted > 0) {
        ++r.spec_steps;
        r.spec_drafted += v.drafted;
        r.spec_accepted += int(v.accepted.size());
      }
      bool stopped = false;
      for (size_t i = 0; i < v.accepted.size() && !stopped; ++i) {
        r.ids.push_back(v.accepted[i]);
        if (on_token && !on_token(v.accepted[i])) {
          // Plain decoding does not append the token its callback refused: drop it and what
          // followed (one forward call, once per generation).
          session.truncate(base + 1 + int(i));
          ++r.forward_calls;
          r.finish_reason = "callback";
          stopped = true;
        }
      }
      if (stopped) break;
      decoder.set_pending(v.next);
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace fak
