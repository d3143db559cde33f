// Prefix cache across sessions: a radix tree over token ids whose edges are whole KV blocks. A new
// request whose prompt starts with a cached prefix starts from those blocks (shared, refcounted)
// and prefills only the rest; reuse is exact because the forward pass computes each position the
// same way whether it came from a cache hit or a cold prefill.
//
// Hybrid (Gated DeltaNet) models also need the recurrent state where the reuse ends: the tree keeps
// the sessions' cold state checkpoints (runtime/session.h) on the nodes at their positions, a hit
// restarts from the deepest checkpoint on the matched path and prefills the rest, and only blocks
// up to a checkpoint are kept (a block past the last one cannot be restarted from).
//
// Partitioned: each partition (tenant: API key or cache_salt) has its own tree, so one tenant's
// prefix never serves another. Unreferenced blocks and checkpoints are evicted least-recently-used
// when the cache holds more than its byte budget (KV blocks + checkpoints).
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
  int64_t checkpoints_evicted = 0;
  size_t blocks = 0;       // blocks held by the tree
  size_t checkpoints = 0;  // hybrid models: recurrent-state checkpoints held by the tree
  size_t checkpoint_bytes = 0;
  size_t bytes = 0;  // KV blocks + checkpoints
  size_t max_bytes = 0;
};

class PrefixCache {
 public:
  PrefixCache(std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache, size_t max_bytes);
  ~PrefixCache();

  // A session holding `tokens`: the longest cached prefix (whole blocks, at most tokens.size() - 1
  // tokens so the last one is computed and logits are fresh) plus a prefill of the rest.
  // *reused receives the number of tokens taken from the cache.
  // prefill_rest = false (dense models): the session holds only the cached part and the caller
  // appends tokens[size():] itself, e.g. in chunks batched with other sequences; hybrid models
  // always prefill here (their checkpoints are taken during the append).
  Session acquire(const std::string& partition, std::span<const int32_t> tokens,
                  int* reused = nullptr, bool prefill_rest = true);
  // Offers a session's full blocks to the cache (e.g. after a turn), so later prompts can reuse
  // them. Hybrid models: with its cold checkpoints, and only the blocks up to the deepest of them.
  void insert(const std::string& partition, const Session& session);
  // Drops everything not in use by a session.
  void clear();

  PrefixCacheStats stats() const;

 private:
  struct Node;
  void insert_locked(const std::string& partition, const Session& session);
  void evict_to_budget();  // caller holds mu_
  void remove_leaf(Node* leaf);

  std::shared_ptr<const Model> model_;
  std::shared_ptr<KvCache> cache_;
  size_t max_bytes_;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Node>> roots_;
  PrefixCacheStats stats_;
  uint64_t clock_ = 0;
};

}  // namespace fak
