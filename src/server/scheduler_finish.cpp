// How a sequence ends: its reply is out, its context goes into the prefix cache (with the last
// token appended) and, for hybrids, its prompt's checkpoints are kept as it is read.
#include <algorithm>
#include <chrono>
#include <string>

#include "core/error.h"
#include "runtime/model_cache.h"
#include "server/fair_share.h"
#include "server/scheduler.h"
#include "server/scheduler_active.h"
#include "store/block_store.h"

namespace fak::server {

void Scheduler::finish(Active& a, const std::string& reason, int32_t tail) {
  a.done = true;
  if (metrics_) metrics_->add_generated(a.generated);
  if (a.choices_left > 0) {
    // Ended before its prompt was read (cancelled, or an error): the choices it would have
    // cloned end with it.
    for (int i = 1; i <= a.choices_left; ++i) a.req.stream->push(GenEvent::done(reason, i));
    a.choices_left = 0;
  }
  if (a.req.on_finish) {
    // A caller's session goes back to its owner before the reply is released, with a checkpoint
    // at the end of the call (hybrid models: what a later edit restarts from).
    if (a.session) a.session->checkpoint();
    try {
      a.req.on_finish(reason, a.last);
    } catch (const std::exception& e) {
      a.req.stream->push(GenEvent::error(e.what()));
      return;
    }
    a.req.stream->push(GenEvent::done(reason, a.index));
    return;
  }
  a.req.stream->push(GenEvent::done(reason, a.index));
  // The whole reply goes into the session first (the next step appends its last token with the
  // others' steps), so that an agent resending this history next turn (prompt + reply) reuses all
  // of it; then offer_to_cache.
  if (tail >= 0 && a.owned && a.session->size() + 1 <= ctx_) {
    a.done = false;
    a.closing = true;
    a.close_token = tail;
    return;
  }
  offer_to_cache(a);
}

void Scheduler::offer_to_cache(Active& a) {
  // The conversation so far, offered to the cache, with a checkpoint at its end on hybrid models.
  try {
    a.session->checkpoint();
    prefix_->insert(a.req.partition, *a.session);
    if (store_) store_->publish(a.req.partition, *a.session);
  } catch (const std::exception&) {
    // A full cache only costs the next turn a prefill.
  }
}

// A prompt just read goes into the cache at once, so a request with the same start that arrives
// while this one decodes its reply (an agent fanned out a moment later) reuses it instead of
// reading it again; the reply's tokens follow when the request ends. Hybrid models: with a
// checkpoint where the prefix cache asked for one and at the end of the prompt (a request sharing
// this prompt can restart there while this one decodes).
void Scheduler::after_prompt_chunk(Active& a) {
  if (!model_->config().is_hybrid()) {
    if (a.prefilling()) return;
    try {
      prefix_->insert(a.req.partition, *a.session);
    } catch (const std::exception&) {
      // A full cache only costs a later request the prefill.
    }
    return;
  }
  bool take = !a.prefilling();
  while (!a.checkpoint_at.empty() && a.checkpoint_at.front() <= a.session->size()) {
    take |= a.checkpoint_at.front() == a.session->size();
    a.checkpoint_at.erase(a.checkpoint_at.begin());
  }
  if (take) offer_to_cache(a);
}

}  // namespace fak::server
