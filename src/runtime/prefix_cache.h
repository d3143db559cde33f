// Prefix cache across sessions: a radix tree over token ids whose edges are KV blocks. A new
// request whose prompt starts with a cached prefix starts from those blocks (shared, refcounted)
// and prefills only the rest; reuse is exact because the forward pass computes each position the
// same way whether it came from a cache hit or a cold prefill.
//
// Reuse ends at a token, not at a block: besides its whole blocks a node may hold tails, the
// partly filled last block of a sequence that ended there (a request's prompt and reply), so the
// next turn of an agent, which resends that whole context, starts at its last token. A dense hit
// may also end inside a cached block (the longest common prefix): the session shares the block
// and copies it before it writes its own rows into it.
//
// Hybrid (Gated DeltaNet) models also need the recurrent state where the reuse ends: the tree keeps
// the sessions' state checkpoints (memory/state_checkpoint.h) on the nodes and tails at their
// positions, a hit restarts from the deepest checkpoint on the matched path (a checkpoint at p
// serves every prompt whose first p tokens match: a state depends on its tokens alone), and only
// blocks up to a checkpoint are kept (a block past the last one cannot be restarted from). Where
// the checkpoints come from: the end of every request (prompt and reply, which an agent's next turn
// resends whole) and of its prompt, offered by the server, and the cache's own, which acquire asks
// the prefilling session for: where the prompt leaves the cached tokens (the next request that
// shares that much then restarts exactly there) and every kCheckpointEvery tokens of a long prompt
// (what a first divergence recomputes at most).
//
// Partitioned: each partition (tenant: API key or cache_salt) has its own tree, so one tenant's
// prefix never serves another.
//
// Memory: the tree shares the KV cache's budget with every live sequence; hybrid checkpoints are
// stored in KV blocks too, so blocks and states are one budget. It keeps what it is given as long
// as there is room, and gives blocks back when the KV cache needs them (it registers as the
// cache's reclaimer), so nothing is evicted while the budget holds everything. max_bytes adds a
// cap of its own on its blocks + checkpoints (0: none).
//
// Eviction: only what no session holds, and only leaves (deeper blocks need their ancestors). Which
// leaf: GreedyDual-Size-Frequency. A node's priority is L + uses x cost, the lowest goes first:
//  - cost: recomputing the block's tokens where they sit. A token at position p costs the matmuls
//    plus attention over p positions, 1 + p / P0 in units of a token at position 0, where P0 is the
//    depth at which attention costs as much as the matmuls (from the config: ~2k tokens for
//    pycoder-6m, ~11k for Qwen2.5-0.5B, ~35k for Qwen2.5-7B). note: per byte, the tail of a long
//    prompt is the dearest block to recompute, not the cheapest: its tokens attend over the most.
//  - uses: how many requests started from the block (1 when inserted, +1 per hit, at most 4), so a
//    prefix an agent resends every turn outlasts one-off prompts of the same age; the cap keeps a
//    once-hot prefix from staying for ever.
//  - L rises to the priority of each block evicted, so what is not touched again ages out.
// A short side request (shallow, used once) therefore goes before the tail of a long conversation
// that has served turns, and between equals the least recently used goes. Hybrid: a leaf without a
// checkpoint cannot be restarted from, so those go first. A checkpoint is priced by the same rule
// per block of memory: uses x cost x (the tokens it saves recomputing: from the previous
// checkpoint on its path) / (block_size x its blocks), so a state that saves a short turn's tokens
// but holds as much memory as hundreds of tokens of KV goes before the KV it would otherwise push
// out, and one that saves a long prompt stays; an agent's previous turn, superseded by the next
// one's deeper checkpoint, is not hit again and ages out.
//
// On disk (runtime/prefix_cache_file.cpp): spill() writes each partition's tree to a file of its
// own and reload() brings the files back into an empty cache, most valuable blocks first, as many
// as the KV budget holds, so a restarted server does not prefill its tenants' prefixes again.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "runtime/session.h"

namespace fak {

// The cache's own checkpoints along a long prompt (see above): at most this many tokens apart.
constexpr int kCheckpointEvery = 1024;

struct PrefixCacheStats {
  int64_t lookups = 0;
  int64_t hits = 0;             // lookups that reused at least one token
  int64_t checkpoint_hits = 0;  // hybrid: lookups that restarted from a state checkpoint
  int64_t tokens_reused = 0;    // prompt tokens taken from the cache
  int64_t tokens_computed = 0;  // prompt tokens prefilled
  int64_t blocks_evicted = 0;
  int64_t blocks_reclaimed = 0;  // of those, given back because the KV cache's budget was spent
  int64_t checkpoints_evicted = 0;
  size_t blocks = 0;            // KV blocks held by the tree (whole blocks and tails)
  size_t checkpoints = 0;       // hybrid models: recurrent-state checkpoints held by the tree
  size_t checkpoint_bytes = 0;  // the KV blocks those checkpoints occupy
  size_t bytes = 0;             // KV blocks + checkpoints
  size_t max_bytes = 0;         // the cache's own cap (0: only the KV cache's budget)
};

// What PrefixCache::spill or reload did.
struct PrefixCacheFileReport {
  int files = 0;           // partitions written or reloaded, one file each
  size_t blocks = 0;       // KV blocks written or reloaded
  size_t checkpoints = 0;  // hybrid state checkpoints written or reloaded
  size_t bytes = 0;        // file bytes written or read
  // Blocks left out, lowest priority first: over spill's max_bytes, or what the KV budget could
  // not hold at reload.
  size_t dropped_blocks = 0;
  int ignored = 0;  // reload: files of partitions `keep` refused (removed at the next spill)
  // One line per file not written, not read or not removed, naming it and why.
  std::vector<std::string> warnings;
};

// One cached block as the spill files carry it. In a partition's list parents come first.
struct PrefixCacheEntry {
  int parent = -1;  // index in the list; -1: a child of the root
  // The edge from the parent: block_size tokens, or fewer for a tail (a partly filled last block,
  // never a parent).
  std::vector<int32_t> tokens;
  int32_t block = -1;  // one reference to it is held by whoever has the entry
  int uses = 0;
  double priority = 0;  // GreedyDual priority less L, so that it carries across runs
  uint64_t last_used = 0;
  std::shared_ptr<const StateCheckpoint> checkpoint;  // hybrid: the state at the entry's end
};

class PrefixCache {
 public:
  // Registers as the KV cache's reclaimer (see above); max_bytes: the cache's own cap, 0 = none;
  // checkpoint_every: the spacing of its own checkpoints along a long prompt.
  PrefixCache(std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache, size_t max_bytes,
              int checkpoint_every = kCheckpointEvery);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // A session holding `tokens`: the longest cached prefix plus a prefill of the rest. Dense models
  // reuse at most tokens.size() - 1 tokens (the last one is computed so that logits are fresh);
  // hybrid models restart from the deepest checkpoint at or before tokens.size(), whose logits
  // come with it. *reused receives the number of tokens taken from the cache.
  // prefill_rest = false: the session holds only the cached part and the caller appends
  // tokens[size():] itself, e.g. in chunks batched with other sequences (and takes a checkpoint at
  // the end to offer it back). With prefill_rest a hybrid session's new checkpoint is offered now.
  // Hybrid models: *checkpoint_at receives the positions (ascending, past the reuse, before the
  // end) where a caller that prefills the rest itself should take checkpoints for the cache and
  // insert() them (with prefill_rest this does it).
  Session acquire(const std::string& partition, std::span<const int32_t> tokens,
                  int* reused = nullptr, bool prefill_rest = true,
                  std::vector<int>* checkpoint_at = nullptr);
  // Offers a session's blocks to the cache (e.g. after a turn), so later prompts can reuse them:
  // the whole blocks and the partly filled last one, so reuse reaches its last token. Hybrid
  // models: with its state checkpoints, and only the blocks up to the deepest of them.
  void insert(const std::string& partition, const Session& session);
  // Hooks for a shared store (store/block_store.h), which fills the cache with blocks computed
  // by other servers. cached_blocks: the whole blocks of tokens acquire would reuse now (no lookup
  // counted). adopt: `tokens` is whole blocks, the last blocks.size() of them computed elsewhere
  // (one reference each handed over; cps[i]: hybrid, the state at the end of blocks[i], or
  // null); the blocks before them must be cached. Returns the blocks taken, 0 when the head is
  // no longer cached (every reference is released then).
  size_t cached_blocks(const std::string& partition, std::span<const int32_t> tokens) const;
  size_t adopt(const std::string& partition, std::span<const int32_t> tokens,
               std::vector<int32_t> blocks,
               std::vector<std::shared_ptr<const StateCheckpoint>> cps);
  // Drops everything not in use by a session.
  void clear();
  // Frees up to n KV blocks that no session holds, lowest priority first; returns how many. The KV
  // cache calls it when its budget is spent. note: takes the cache's lock, so it must not run
  // from inside a PrefixCache call (none allocates while holding it).
  size_t reclaim(size_t n);

  PrefixCacheStats stats() const;

  // Writes every partition's tree to dir/<hash of the partition>.fakprefix (atomically; the
  // partition's name is in the file, in clear: callers hash anything secret) and removes the other
  // .fakprefix files there. At most max_bytes of files (0: no cap): past it, what eviction would
  // drop first is left out. A file that cannot be written (a full disk) is a warning, and the
  // previous one, if any, stays. Safe while others use the cache: blocks are held while written.
  PrefixCacheFileReport spill(const std::filesystem::path& dir, size_t max_bytes) const;
  // Loads the .fakprefix files in dir of partitions `keep` accepts (null: all) into the cache:
  // across all of them the most valuable blocks first, as many as the KV cache's free blocks and
  // max_bytes hold. A file that is damaged, truncated or of another model or KV layout is skipped
  // with a warning. Removes temp files that writers killed mid-write left in dir.
  PrefixCacheFileReport reload(const std::filesystem::path& dir,
                               const std::function<bool(const std::string&)>& keep = nullptr);

 private:
  struct Node;
  void insert_locked(const std::string& partition, const Session& session);
  // Evicts, lowest priority first, until done(blocks freed so far) or nothing more can go;
  // blocks_only: only what frees a KV block (no checkpoint dropped alone). Returns the blocks
  // freed. Caller holds mu_.
  size_t evict(const std::function<bool(size_t freed)>& done, bool blocks_only);
  void evict_to_budget();  // caller holds mu_
  // evicted: counted in blocks_evicted (false: a tail replaced by a longer entry that holds it).
  void remove_leaf(Node* leaf, bool evicted = true);
  void drop_checkpoint(Node* node);
  void touch(Node* node, uint64_t now, bool hit);  // a request used the node
  double cost(const Node* node) const;
  // A checkpoint's priority per block of memory (see above).
  double checkpoint_priority(const Node* node) const;
  // Adds the entry of a tail (or whole block) below `parent`, or touches the one there.
  Node* add_child(Node* parent, std::vector<int32_t> key, int32_t block, uint64_t now);
  // Spill and reload (prefix_cache_file.cpp) go through these: every partition's blocks, parents
  // first, each block retained for the caller; and the reverse, taking over each entry's block
  // reference (released when the cache has the block already or its parent is missing).
  std::map<std::string, std::vector<PrefixCacheEntry>> snapshot() const;
  void restore(const std::string& partition, std::vector<PrefixCacheEntry>& entries);

  std::shared_ptr<const Model> model_;
  std::shared_ptr<KvCache> cache_;
  size_t max_bytes_;
  int checkpoint_every_;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Node>> roots_;
  PrefixCacheStats stats_;
  uint64_t clock_ = 0;
  double inflation_ = 0;  // L: the priority of the last block evicted
  double crossover_ = 0;  // P0, in tokens
};

}  // namespace fak
