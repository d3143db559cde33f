// Prefix cache records: a chain of cached blocks (and a hybrid model's state checkpoints at their
// ends) as bytes, for a shared store (store/block_store.h) rather than a file. The same format as
// the prefix cache files (runtime/prefix_cache_file.cpp) — the header names the model, the KV
// layout and the partition, a checksum closes it — with a "depth" field in the header: the chain's
// first block is the child of a block that many levels below the root, so its checkpoint positions
// can be checked as a file's are.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "runtime/session.h"

namespace fak {

struct PrefixRecordBlock {
  std::vector<int32_t> tokens;  // block_size ids: the edge from the block before
  int32_t block = -1;           // in the KV cache; read, not retained
  std::shared_ptr<const StateCheckpoint> checkpoint;  // hybrid: the state at its end, or null
};

// chain[0] ends at position (depth + 1) * block_size; each block is the child of the one before.
// header: fields the record's header carries besides the format's own (e.g. the key it is stored
// under, which the reader checks). Reads the blocks' rows: on the thread that owns the KV cache.
std::string write_prefix_record(const Model& model, const KvCache& cache,
                                const std::string& partition, int depth,
                                std::span<const PrefixRecordBlock> chain,
                                const nlohmann::json& header);

// A record read back and checked whole (checksum, model, KV layout, a chain, token ids), not yet
// in any cache. Parsing reads only the cache's layout, so it may run on any thread.
class PrefixRecord {
 public:
  // Throws fak::Error starting with label and saying what is wrong, as a file's reload does.
  static PrefixRecord parse(std::string bytes, const Model& model, const KvCache& cache,
                            const std::string& label);
  // The same over bytes someone else owns (a store reply read into huge pages), kept alive by
  // owner for as long as the record.
  static PrefixRecord parse(std::string_view bytes, std::shared_ptr<const void> owner,
                            const Model& model, const KvCache& cache, const std::string& label);
  PrefixRecord(PrefixRecord&&) noexcept;
  PrefixRecord& operator=(PrefixRecord&&) noexcept;
  ~PrefixRecord();

  const std::string& partition() const;
  const nlohmann::json& header() const;
  int depth() const;
  size_t size() const;  // blocks
  size_t bytes() const;
  std::vector<int32_t> tokens(size_t i) const;
  bool has_checkpoint(size_t i) const;
  // Block i's rows in a new KV block (refcount 1, the caller's): on the thread that owns the cache.
  int32_t load_block(size_t i, KvCache& cache) const;
  // Block i's checkpoint (hybrid), its state in new blocks of `cache`, or null.
  std::shared_ptr<const StateCheckpoint> checkpoint(size_t i, const Model& model,
                                                    const std::shared_ptr<KvCache>& cache) const;

  struct Parsed;

 private:
  explicit PrefixRecord(std::unique_ptr<Parsed> p);
  std::unique_ptr<Parsed> p_;
};

}  // namespace fak
