// The cell metadata of one sequence, kept apart from KV storage: for every position the token id
// and the cell (block, slot) that holds its K/V rows, with blocks shared between sequences by
// reference count (a block's owners). Storage lives in KvCache; KvCells only talks to it through
// BlockPool, so the bookkeeping of clone, copy-on-write, truncate and span removal is tested
// alone (tests/kv_cells_test.cpp) with a pool that holds no KV at all.
//
// Positions are dense: position p is cell (blocks[p / block_size], p % block_size). Removing a span
// moves the later positions down; the caller moves their rows (see Session::evict).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace fak {

// Fixed-size blocks of cells with reference counts (implemented by KvCache).
class BlockPool {
 public:
  virtual ~BlockPool() = default;
  virtual int block_size() const = 0;
  virtual int32_t allocate() = 0;  // refcount 1
  virtual void retain(int32_t block) = 0;
  virtual void release(int32_t block) = 0;  // frees at refcount 0
  virtual int refcount(int32_t block) const = 0;
  // A new block (refcount 1) holding a copy of the first n_rows rows of src.
  virtual int32_t copy_block(int32_t src, int n_rows) = 0;
};

struct KvCell {
  int32_t block;
  int slot;
};

class KvCells {
 public:
  explicit KvCells(BlockPool* pool) : pool_(pool) {}
  // Takes over one reference per block; the blocks must cover the tokens.
  KvCells(BlockPool* pool, std::vector<int32_t> tokens, std::vector<int32_t> blocks);
  ~KvCells() { release_all(); }
  KvCells(KvCells&& other) noexcept;
  KvCells& operator=(KvCells&& other) noexcept;
  KvCells(const KvCells&) = delete;
  KvCells& operator=(const KvCells&) = delete;

  // The same cells for another sequence: every block gains an owner, nothing is copied.
  KvCells share() const;

  int size() const { return int(tokens_.size()); }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::vector<int32_t>& blocks() const { return blocks_; }
  KvCell cell(int pos) const;
  int owners(int pos) const { return pool_->refcount(cell(pos).block); }

  // Makes the cells of positions [from, to) exist and be this sequence's alone, so they can be
  // written: blocks are allocated past the end, and a shared block is copied first (keeping its
  // rows before `from`, or all rows with keep_all_rows).
  void reserve(int from, int to, bool keep_all_rows = false);
  // Records tokens at the end (their cells reserved beforehand).
  void push(std::span<const int32_t> tokens);
  // Keeps the first n positions; blocks no longer needed lose this owner.
  void truncate(int n);
  // Removes positions [begin, end): later positions move down by end - begin (the caller moves
  // their rows in storage first), and the blocks past the new end lose this owner.
  void erase(int begin, int end);
  void release_all();

 private:
  BlockPool* pool_;
  std::vector<int32_t> tokens_;
  std::vector<int32_t> blocks_;
};

}  // namespace fak
