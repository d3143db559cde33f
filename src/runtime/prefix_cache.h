// Prefix cache across sessions: a radix tree over token ids whose edges are whole KV blocks. A new
// request whose prompt starts with a cached prefix starts from those blocks (shared, refcounted)
// and prefills only the rest; reuse is exact because the forward pass computes each position the
// same way whether it came from a cache hit or a cold prefill.
//
// Partitioned: each partition (tenant: API key or cache_salt) has its own tree, so one tenant's
// prefix never serves another. Unreferenced blocks are evicted least-recently-used when the cache
// holds more than its byte budget.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "runtime/session.h"

namespace fak {

struct PrefixCacheStats {
  int64_t lookups = 0;
  int64_t hits = 0;             // lookups that reused at least one block
  int64_t tokens_reused = 0;    // prompt tokens taken from the cache
  int64_t tokens_computed = 0;  // prompt tokens prefilled
  int64_t blocks_evicted = 0;
  size_t blocks = 0;  // blocks held by the tree
  size_t bytes = 0;
  size_t max_bytes = 0;
};

class PrefixCache {
 public:
  PrefixCache(std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache, size_t max_bytes);
  ~PrefixCache();

  // A session holding `tokens`: the longest cached prefix (whole blocks, at most tokens.size() - 1
  // tokens so the last one is computed and logits are fresh) plus a prefill of the rest.
  // *reused receives the number of tokens taken from the cache.
  Session acquire(const std::string& partition, std::span<const int32_t> tokens, int* reused = nullptr);
  // Offers a session's full blocks to the cache (e.g. after a turn), so later prompts can reuse them.
  void insert(const std::string& partition, const Session& session);
  // Drops everything not in use by a session.
  void clear();

  PrefixCacheStats stats() const;

 private:
  struct Node;
  void evict_to_budget();  // caller holds mu_

  std::shared_ptr<const Model> model_;
  std::shared_ptr<KvCache> cache_;
  size_t max_bytes_;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Node>> roots_;
  PrefixCacheStats stats_;
  uint64_t clock_ = 0;
};

}  // namespace fak
