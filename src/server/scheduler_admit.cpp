// The scheduler's admission: a queued request becomes an active sequence (its prefix from the
// cache, its decoder), a request's first choice clones the others once its prompt is read, and
// each step's prompt reading is shared out (fair_share.h).
#include <algorithm>
#include <chrono>
#include <limits>
#include <string>

#include "core/error.h"
#include "runtime/model_cache.h"
#include "server/fair_share.h"
#include "server/prefill_budget.h"
#include "server/scheduler.h"
#include "server/scheduler_active.h"
#include "store/block_store.h"

namespace fak::server {

void Scheduler::admit(GenRequest r) {
  if (r.stream->cancelled()) {
    if (metrics_) metrics_->add_cancelled();
    if (r.on_finish) r.on_finish("cancelled", -1);
    return;
  }
  // Everything that can fail happens before r is taken apart, so the error reaches r's own stream
  // (and a lent session goes back to its owner).
  try {
    RunOptions run;
    run.rules = r.rules;
    run.max_tokens = r.max_tokens;
    run.context = ctx_;
    // Drafts for sequences that want no logprobs (a verified token has none); the MTP head keeps
    // its session's hidden states, which a caller's session is not made to hold.
    const bool speculates =
        options_.draft && r.top_logprobs < 0 && !(r.session && options_.draft->mtp);
    if (speculates && !options_.draft->mtp) run.drafter = ngram_drafter(*options_.draft);
    SequenceRun sequence(std::move(run), r.rules.grammar ? token_index() : nullptr);
    std::optional<Session> owned;
    int reused = 0;
    std::vector<int> checkpoint_at;
    if (!r.session) {
      if (r.prefetched) {
        store_->install(*prefix_, r.prompt, *r.prefetched);
        r.prefetched.reset();
      }
      // Only the cached prefix here; the rest is prefilled in chunks by step().
      owned.emplace(
          prefix_->acquire(r.partition, r.prompt, &reused, /*prefill_rest=*/false, &checkpoint_at));
      if (metrics_) metrics_->add_prompt(int(r.prompt.size()), reused);
    } else {
      // An empty prompt: nothing to read, decode from where the session is.
      check(r.prompt.empty() || (int(r.prompt.size()) >= r.session->size() &&
                                 std::equal(r.session->tokens().begin(), r.session->tokens().end(),
                                            r.prompt.begin())),
            "scheduler: a session's prompt must extend what the session holds");
      if (metrics_ && int(r.prompt.size()) > r.session->size())
        metrics_->add_prompt(int(r.prompt.size()) - r.session->size(), 0);
    }
    auto a = std::make_unique<Active>();
    active_.reserve(active_.size() + 1);
    r.stream->push(GenEvent::started(r.session ? 0 : int(r.prompt.size()), reused));
    a->req = std::move(r);
    if (owned) {
      a->owned.emplace(std::move(*owned));
      a->session = &*a->owned;
    } else {
      a->session = a->req.session;  // a caller's session: decoding starts at the next step
    }
    a->run.emplace(std::move(sequence));
    a->checkpoint_at = std::move(checkpoint_at);
    a->choices_left = a->req.n - 1;
    a->id = ++next_active_id_;
    if (a->owned) follow_leader(*a);
    a->speculates = speculates;
    if (a->speculates && options_.draft->mtp) start_mtp(*a);
    active_.push_back(std::move(a));
  } catch (const std::exception& e) {
    if (r.on_finish) {
      try {
        r.on_finish("error", -1);
      } catch (const std::exception&) {
      }
    }
    r.stream->push(GenEvent::error(e.what()));
  }
}

// One forward call for every active sequence: a sampled token for each one that is decoding, and
// a chunk of the prompt for those still prefilling (at most prefill_chunk prompt tokens per step in
// all, oldest request first), so a long prompt never stalls the others' decoding for its whole
// prefill. Chunking changes nothing in the results: each position is computed the same way
// whatever the batch (ops/matmul.h).
void Scheduler::spawn_choices() {
  std::vector<std::unique_ptr<Active>> spawned;
  for (auto& ap : active_) {
    Active& a = *ap;
    if (a.choices_left == 0 || a.prefilling() || !a.session->has_logits() ||
        a.req.stream->cancelled())
      continue;
    for (int i = 1; i <= a.choices_left; ++i) {
      auto c = std::make_unique<Active>();
      c->req = a.req;  // on_finish is empty: a caller's session has one choice
      c->owned.emplace(a.session->clone());
      c->session = &*c->owned;
      // Nothing generated yet: the start state, with the choice's own seed.
      c->run.emplace(*a.run, a.req.rules.sampling.seed + uint64_t(i));
      c->index = i;
      c->speculates = a.speculates;
      if (c->speculates && options_.draft->mtp) start_mtp(*c);
      spawned.push_back(std::move(c));
    }
    a.choices_left = 0;
  }
  for (auto& c : spawned) active_.push_back(std::move(c));
}

// Agents started together (sub-agents fanned out with one long system prompt and tool list) send
// the same first thousands of tokens at once, before any of them is in the prefix cache. The first
// one reads them; the others wait and clone its session where their prompts part (a clone shares
// the blocks, and on hybrid models carries the recurrent state), then read their own rest. What
// they compute is what they would have computed alone: the shared positions are the same tokens
// at the same positions, and chunking changes no result (ops/matmul.h).
void Scheduler::follow_leader(Active& a) {
  // Below this many tokens the wait costs about what it saves.
  constexpr int kMinShared = 64;
  const std::vector<int32_t>& prompt = a.req.prompt;
  Active* best = nullptr;
  int best_to = a.session->size() + kMinShared - 1;
  for (const auto& op : active_) {
    const Active& o = *op;
    if (&o == &a || o.follows != 0 || o.done || o.closing || !o.owned || !o.session ||
        !o.prefilling() || o.req.partition != a.req.partition || o.req.stream->cancelled())
      continue;
    const auto [mine, theirs] =
        std::mismatch(prompt.begin(), prompt.end(), o.req.prompt.begin(), o.req.prompt.end());
    // The follower keeps at least its last prompt token to read itself: its logits are its own.
    const int common = std::min(int(mine - prompt.begin()), int(prompt.size()) - 1);
    if (common > best_to && o.session->size() <= common) {
      best = op.get();
      best_to = common;
    }
  }
  if (!best) return;
  a.follows = best->id;
  a.follow_to = best_to;
  // Hybrid models: the leader keeps a checkpoint where the prompts part, and offers it to the
  // cache (after_prompt_chunk), so a later agent with the same start restarts there too.
  if (model_->config().is_hybrid()) {
    auto& at = best->checkpoint_at;
    const auto it = std::lower_bound(at.begin(), at.end(), best_to);
    if (it == at.end() || *it != best_to) at.insert(it, best_to);
  }
}

int Scheduler::next_follow_point(const Active& leader) const {
  int point = std::numeric_limits<int>::max();
  for (const auto& op : active_)
    if (op->follows == leader.id && !op->done && op->follow_to > leader.session->size())
      point = std::min(point, op->follow_to);
  return point;
}

void Scheduler::join_followers() {
  for (auto& fp : active_) {
    Active& f = *fp;
    if (f.follows == 0 || f.done) continue;
    const auto leader = std::find_if(active_.begin(), active_.end(),
                                     [&](const auto& o) { return o->id == f.follows; });
    const Active* l = leader == active_.end() ? nullptr : leader->get();
    if (l && !l->done && l->session && l->session->size() < f.follow_to) continue;  // not yet
    if (l && !l->done && l->session && l->session->size() == f.follow_to) {
      try {
        const int had = f.session->size();
        Session shared = l->session->clone();
        f.mtp.reset();  // it drafts from the session it was made for
        f.owned.emplace(std::move(shared));
        f.session = &*f.owned;
        if (f.speculates && options_.draft && options_.draft->mtp) start_mtp(f);
        std::erase_if(f.checkpoint_at, [&](int at) { return at <= f.follow_to; });
        if (metrics_) metrics_->add_prompt(0, f.follow_to - had);
        // The usage a client sees counts the shared tokens as cached: none was read for it.
        f.req.stream->push(GenEvent::started(int(f.req.prompt.size()), f.follow_to));
      } catch (const std::exception&) {
        // No KV for the clone's own block: it reads the shared part itself.
      }
    }
    f.follows = 0;  // cloned, or on its own: the leader ended or went past the point
    f.follow_to = 0;
  }
}

int Scheduler::prefill_budget() const {
  // prefill_budget.h: fewer prompt tokens a step deep in a context while others decode.
  bool others_decode = false;
  int64_t deepest = 0;
  for (const auto& ap : active_) {
    if (ap->done || !ap->session) continue;
    if (ap->prefilling())
      deepest = std::max<int64_t>(deepest, ap->session->size());
    else
      others_decode = true;
  }
  return server::prefill_budget(model_->config(), options_.prefill_chunk, deepest, others_decode);
}

std::vector<int> Scheduler::plan_prefill() const {
  std::vector<int> wanted;
  std::vector<std::string> tenants;
  for (const auto& ap : active_) {
    const bool reads = !ap->done && ap->session && !ap->req.stream->cancelled();
    wanted.push_back(reads ? ap->prefill_left() : 0);
    tenants.push_back(ap->req.tenant);
  }
  return share_prefill(prefill_budget(), wanted, tenants);
}

}  // namespace fak::server
