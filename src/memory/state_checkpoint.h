// A hybrid sequence's Gated DeltaNet state and its next-token logits at one position: what a
// session restarts from after an edit, and what the prefix cache hands to a request whose prompt
// starts with the same tokens. Since every token's state update is the same whatever the call
// boundaries (ops/deltanet.cpp), a checkpoint at position p serves any sequence whose first p
// tokens are these, exactly.
//
// Its bytes live in KV blocks of the sequence's cache (KvCache::write_block_bytes): a state is
// large (Qwen3.5-0.8B 19 MiB, Qwen3.6-27B ~150 MiB in f32), and in blocks it is inside the one KV
// budget, taken back by the same reclaimer (the prefix cache's eviction policy prices it against
// the KV it would otherwise keep) and, on a GPU, kept in the device's memory like the KV. Stored
// as f32, bit for bit: a state rounded to bf16 would resume a different sequence than the cold run.
//
// Immutable once taken: a session, its clones and the prefix cache share it (shared_ptr), and its
// blocks go back to the cache when the last holder lets go.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "memory/kv_cache.h"
#include "memory/recurrent_state.h"

namespace fak {

class StateCheckpoint {
 public:
  // Copies state and logits into new blocks of `cache`. Throws KvBudgetError when the budget
  // cannot hold them (after the cache's reclaimer had its chance).
  static std::shared_ptr<const StateCheckpoint> take(const std::shared_ptr<KvCache>& cache, int pos,
                                                     const RecurrentState& state,
                                                     std::span<const float> logits);
  // The same from the bytes of a file (payload(): the state's floats, then the logits').
  static std::shared_ptr<const StateCheckpoint> from_payload(const std::shared_ptr<KvCache>& cache,
                                                             int pos, std::span<const char> bytes,
                                                             size_t state_bytes);
  ~StateCheckpoint();
  StateCheckpoint(const StateCheckpoint&) = delete;
  StateCheckpoint& operator=(const StateCheckpoint&) = delete;

  int pos() const { return pos_; }
  // What it holds of the KV budget: whole blocks.
  size_t bytes() const { return blocks_.size() * cache_->block_bytes(); }
  size_t n_blocks() const { return blocks_.size(); }
  size_t state_bytes() const { return state_bytes_; }
  size_t logits_size() const { return n_logits_; }
  // state must have the checkpoint's shape; logits is resized.
  void restore(RecurrentState& state, std::vector<float>& logits) const;
  // The state's bytes then the logits' (for files).
  void payload(std::vector<char>& out) const;

  // Blocks needed for a payload of this many bytes.
  static size_t blocks_for(const KvCache& cache, size_t payload_bytes);

 private:
  StateCheckpoint(std::shared_ptr<KvCache> cache, int pos, size_t state_bytes, size_t n_logits)
      : cache_(std::move(cache)), pos_(pos), state_bytes_(state_bytes), n_logits_(n_logits) {}
  // Writes `parts` (concatenated) into freshly allocated blocks.
  void store(std::span<const std::span<const char>> parts);
  void load(std::span<const std::span<char>> parts) const;

  std::shared_ptr<KvCache> cache_;
  int pos_ = 0;
  size_t state_bytes_ = 0, n_logits_ = 0;
  std::vector<int32_t> blocks_;
};

}  // namespace fak
