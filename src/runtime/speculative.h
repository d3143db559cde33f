// Speculative decoding with prompt-lookup (n-gram) drafts. Decode at batch 1 is bound by memory
// bandwidth: each step reads every weight once for one token. Verifying k drafted tokens in one
// forward call of k + 1 positions reads them once for up to k + 1 tokens. Agents editing code
// repeat long spans of their context (a file they read, rewritten with a small change), and
// looking up the context's last few tokens earlier in the context drafts those spans well.
//
// The loop that drafts, verifies and accepts is SequenceRun's (runtime/sequence_run.h), the one
// decode loop of `fak run`, `fak chat` and the server. Here: the drafters, and verify_draft(s),
// which append [last] + draft in ONE forward call with the logits of every position, choose each
// position's token as plain decoding would and accept draft[i] while the choice equals it; the
// choice at the first disagreement (or after the whole draft) is the next token. Rejected
// positions are dropped without another forward call (Session::truncate with the kept row's
// logits).
//
// Why it is exact: fak's forward computes a position's logits with the same floating-point
// operations whatever the batch or chunking (src/ops/matmul.h), so row i of the verify call is
// bit-identical to the logits plain decoding sees at that step, and the Sampler is called with the
// same logits and history in the same order as plain decoding calls it. Greedy output is therefore
// token-for-token that of plain greedy decoding, and so is seeded sampling at temperature > 0: the
// sampler draws one random number per call, in the same order. (For a deterministic drafter this
// "sample, then compare" rule is standard speculative sampling: with the draft distribution a point
// mass on d, min(1, p(d)/q(d)) = p(d) is the chance the sample equals d, and a rejected sample is
// distributed as p without d, which is the residual max(0, p - q) normalised.)
//
// Hybrid (Gated DeltaNet) models too: their state does not depend on how tokens were grouped into
// calls (ops/deltanet.cpp), and a verify call records its DeltaNet inputs, so the rejected tail is
// dropped by winding the state back over the accepted tokens alone (Model::rewind_state; a
// backend that records nothing restores the state from before the call and replays them).
//
// The server's scheduler verifies several sequences in one forward call: each appends 1 + k_i
// tokens through append_batch (which returns every position's logits per session when asked), and
// each sequence's result is bit-identical to verifying it alone. A sequence with no draft takes
// part with k_i = 0, which is its plain decode step. Stop strings, and any other reason to end
// inside the accepted tokens, are the caller's: Session::truncate drops the tokens after the end
// exactly (one forward call, once per request). Note: a batch of B sequences computes B x (1 + k)
// rows per call, so the step stops being bound by weight reads sooner than plain batched decode; a
// scheduler should shrink k as the batch grows.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "runtime/sampler.h"
#include "runtime/session.h"

namespace fak {

// Proposes up to max_tokens tokens to follow `history` (ngram_drafter, or the MTP head's
// mtp_drafter, runtime/mtp_draft.h).
using Drafter =
    std::function<std::vector<int32_t>(std::span<const int32_t> history, int max_tokens)>;

struct DraftOptions {
  int max_draft = 8;  // k: tokens proposed per step
  int max_ngram = 3;  // the longest suffix of the history looked up ...
  int min_ngram = 1;  // ... down to this one
  // Drafts from the model's multi-token-prediction head (runtime/mtp_draft.h) instead of prompt
  // lookup (the n-gram sizes are then unused).
  bool mtp = false;
  // Throws fak::Error naming the field (max_draft 1..64, 1 <= min_ngram <= max_ngram <= 16).
  void validate() const;
};

// Prompt lookup: for n from max_ngram down to min_ngram, the most recent earlier occurrence of the
// history's last n tokens; returns the tokens that followed it, at most min(max_draft, limit) and
// never past the end of the history. Empty when no suffix occurs earlier. O(history * n).
std::vector<int32_t> ngram_draft(std::span<const int32_t> history, const DraftOptions& options,
                                 int limit = 1 << 30);

// A Drafter that calls ngram_draft.
Drafter ngram_drafter(const DraftOptions& options);

// One row's choice while a draft is accepted: the token plain decoding chooses there, whether it is
// a stop id (never accepted: it becomes the next token), and whether taking it ends the run (a
// grammar it completes: nothing after it is accepted).
struct RowChoice {
  int32_t token = 0;
  bool stop = false;
  bool ends = false;
};
using ChooseRow =
    std::function<RowChoice(std::span<const float> logits, std::span<const int32_t> history)>;

struct Verified {
  std::vector<int32_t> accepted;  // the draft's agreed prefix, appended after `last`
  RowChoice next;                 // the choice after them; not appended (may be a stop id)
  bool ended = false;             // the last accepted token ended the run: there is no `next`
  int drafted = 0;                // draft tokens verified (after cutting to the context)
};

// The acceptance half of a verify, for a caller that ran the forward itself: the session has just
// appended [last] + draft from position `base`, with every position's logits in rows
// ([1 + draft][vocab]); each row is chosen by `choose` with the history plain decoding would pass,
// in order, and the session is cut back to what was accepted.
Verified accept_rows(Session& session, int base, std::span<const int32_t> draft,
                     const std::vector<float>& rows, const ChooseRow& choose);

struct VerifyRequest {
  Session* session = nullptr;
  int32_t last = 0;                   // the token sampled from session->logits(), not yet appended
  std::span<const int32_t> draft;     // proposed continuation after it; cut to fit the context
  Sampler* sampler = nullptr;         // the sequence's sampler (greedy: temperature 0)
  std::span<const int32_t> stop_ids;  // a drafted stop token is never accepted: it becomes next
};

// Appends [last] + draft and accepts as above, each row chosen by request.sampler. Afterwards the
// session holds its tokens before, `last` and `accepted`, with logits() after the last of them:
// bit-identical to a session that appended them one by one (hybrid models: the same DeltaNet state
// too).
Verified verify_draft(const VerifyRequest& request);

// The same for many sequences in one forward call (they must share model and cache); result i is
// bit-identical to verify_draft(requests[i]) alone.
std::vector<Verified> verify_drafts(std::span<const VerifyRequest> requests);

}  // namespace fak
