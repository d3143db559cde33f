// The scheduler's KV arbitration: each step's batch gets its blocks before the forward call, and a
// sequence that cannot have them ends with a clear error while the rest go on.
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

void Scheduler::stop_for_kv(Active& a, const std::string& message) {
  a.done = true;
  if (a.req.on_finish) {
    try {
      a.req.on_finish("error", -1);
    } catch (const std::exception&) {
    }
  }
  a.req.stream->push(GenEvent::error(message, a.index, 503));
  // Its blocks go back now, for the sequences still in this step.
  a.session = nullptr;
  a.owned.reset();
}

// Each sequence of the batch gets the KV blocks its tokens need before the forward call, oldest
// first, so running out fails one sequence rather than the whole batch (append_batch would). The
// KV cache has already taken back what the prefix cache could give when it throws KvBudgetError;
// then the blocks of sequences that finished this step go, and then the newest sequence that owns
// its blocks is stopped to free them: an older request has the most work invested, and a new one
// fails at once instead of starving those before it. A sequence with nothing newer to take from
// fails itself.
void Scheduler::reserve_kv(std::vector<Session*>& batch,
                           std::vector<std::span<const int32_t>>& spans,
                           std::vector<Active*>& members) {
  const std::string flag = " (--kv-mem " + std::to_string(budget_.bytes >> 20) + " MiB)";
  for (size_t i = 0; i < members.size(); ++i) {
    Active& a = *members[i];
    if (a.done) continue;
    for (;;) {
      try {
        a.session->reserve_for_append(int(spans[i].size()));
        break;
      } catch (const KvBudgetError& e) {
        if (a.closing) {  // the reply is out: it goes to the cache without its last token
          a.closing = false;
          a.done = true;
          offer_to_cache(a);
          break;
        }
        bool released = false;
        for (auto& other : active_) {
          if (other->closing) {  // likewise, to free what it holds
            other->closing = false;
            other->done = true;
            offer_to_cache(*other);
          }
          if (other->done && other->owned) {
            other->session = nullptr;
            other->owned.reset();
            released = true;
          }
        }
        if (released) continue;
        // Who gives way (fair_share.h): the newest sequence of the API key holding the most KV
        // beyond an equal share; within one key the older request wins.
        std::vector<KvHolder> holders;
        std::vector<Active*> who;
        size_t requester = 0;
        for (auto& other : active_) {
          if (other->done || !other->session) continue;
          if (other.get() == &a) requester = holders.size();
          holders.push_back({other->req.tenant, other->session->size(), other->owned.has_value()});
          who.push_back(other.get());
        }
        const std::optional<size_t> pick = kv_victim(holders, requester);
        Active* victim = pick ? who[*pick] : &a;
        if (victim == &a) {
          stop_for_kv(a, e.what() + flag + "; retry later");
          break;
        }
        const bool same_key = victim->req.tenant == a.req.tenant;
        stop_for_kv(*victim,
                    std::string(same_key ? "stopped to free KV memory for an older request: "
                                         : "stopped to free KV memory for another API key "
                                           "(yours held more than its share): ") +
                        e.what() + flag + "; retry later");
      } catch (const std::exception& e) {
        stop_for_kv(a, e.what());
        break;
      }
    }
  }
  size_t kept = 0;
  for (size_t i = 0; i < members.size(); ++i)
    if (!members[i]->done) {
      batch[kept] = batch[i];
      spans[kept] = spans[i];
      members[kept] = members[i];
      ++kept;
    }
  batch.resize(kept);
  spans.resize(kept);
  members.resize(kept);
}

}  // namespace fak::server
