// Fairness between API keys (tenants), as the scheduler applies it: each key that has work in the
// server gets an equal share of the queue, of the batch's slots, of each step's prompt reading
// and of the KV memory; when something must be refused or stopped, it is the work of the key
// furthest over its share. Pure functions over small views of the scheduler's state, so the
// rules are testable apart from the model.
//
// One key alone keeps the old behaviour exactly: the whole queue, first come first served, and
// the newest sequence stopped first when KV memory runs out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fak::server {

// The queue is full (capacity requests) and a request of `incoming` arrives. Returns the position
// in `queued` (each queued request's tenant, oldest first) of the request to drop for it: the
// newest of the tenant furthest over its share, where a share is capacity / (tenants queued,
// counting `incoming`). nullopt: `incoming` is at or over its own share, so it is the one refused.
std::optional<size_t> queue_victim(const std::vector<std::string>& queued,
                                   const std::string& incoming, size_t capacity);

// Which queued request takes the next free slot (queued: each request's tenant, oldest first;
// non-empty): one of the tenant with the fewest sequences running (running[i], for queued[i]'s
// tenant), between those the tenant admitted least recently (last[i]: a counter of admissions, 0
// for never), and its oldest request. Round robin between keys, whatever their queue lengths.
size_t next_admitted(const std::vector<std::string>& queued, const std::vector<int>& running,
                     const std::vector<uint64_t>& last);

// Prompt tokens each sequence reads this step, from `budget` in all. wanted[i]: what sequence i
// (oldest first) still has to read; tenant[i]: its key. Every tenant gets budget / tenants (its
// sequences oldest first), and what a tenant cannot use goes to the others, oldest first; so one
// key's 32k-token prompt never holds back another key's prompt.
std::vector<int> share_prefill(int budget, const std::vector<int>& wanted,
                               const std::vector<std::string>& tenant);

// KV memory ran out while `requester` needed more. Sequences (oldest first): tenant, tokens held,
// and whether stopping it frees memory. Returns the sequence to stop: the newest stoppable one of
// the tenant whose tokens exceed an equal share (of the tokens all sequences hold) the most;
// ties go to the tenant holding more. May return `requester` itself (it fails then); nullopt when
// nothing can be stopped.
struct KvHolder {
  std::string tenant;
  long long tokens = 0;
  bool stoppable = false;
};
std::optional<size_t> kv_victim(const std::vector<KvHolder>& holders, size_t requester);

}  // namespace fak::server
