// One active sequence of the scheduler (a request's choice): private to the scheduler's files
// (scheduler.cpp and its admission, KV and finishing parts).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "runtime/mtp_draft.h"
#include "runtime/sequence_run.h"
#include "runtime/session.h"
#include "server/scheduler.h"

namespace fak::server {

struct Scheduler::Active {
  GenRequest req;
  std::optional<Session> owned;  // from the prefix cache (empty for a caller's session)
  Session* session = nullptr;    // &owned or req.session
  // The choice's run (runtime/sequence_run.h): its decoder (sampler, grammar, reasoning budget),
  // limits and drafts; `step` is what it planned for this step's forward call.
  std::optional<SequenceRun> run;
  SequenceRun::Step step;
  int index = 0;         // which choice of the request
  int choices_left = 0;  // the first choice clones the rest once the prompt is read
  int generated = 0;
  bool done = false;
  int32_t last = -1;  // last token sampled
  // Speculative decoding: whether this sequence drafts, and this step's verify (step.append from
  // position verify_base, every position's logits, which the run's commit reads).
  bool speculates = false;
  std::vector<float> verify_rows;
  // --draft mtp: the head's drafter for this sequence's session (declared after `owned`, so it
  // goes first).
  std::unique_ptr<MtpDrafter> mtp;
  int verify_base = -1;  // -1: not verifying this step
  // Hybrid models: where the prefix cache asked for checkpoints of this prompt (ascending).
  std::vector<int> checkpoint_at;
  bool read_prompt = false;  // this step's call reads a chunk of the prompt
  // Prompts read at the same time share their common start (scheduler_admit.cpp): a sequence
  // admitted while another one is still reading the same tokens waits for it and clones its
  // session there instead of reading them again. id names a sequence while it is active;
  // follows is the id of the one this one waits for (0: none), follow_to where it clones.
  uint64_t id = 0;
  uint64_t follows = 0;
  int follow_to = 0;
  // The reply is out; the session appends the token sampled last (or the stop token) in the next
  // step, so the prefix cache holds the whole context an agent resends next turn.
  bool closing = false;
  int32_t close_token = -1;
  // The uncached part of the prompt is prefilled in chunks, inside decode steps.
  bool prefilling() const { return session->size() < int(req.prompt.size()); }
  // A follower reads nothing until it has cloned its leader's session.
  int prefill_left() const {
    return prefilling() && follows == 0 ? int(req.prompt.size()) - session->size() : 0;
  }
};

}  // namespace fak::server
