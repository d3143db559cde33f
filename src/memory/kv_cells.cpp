#include "memory/kv_cells.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace fak {

KvCells::KvCells(BlockPool* pool, std::vector<int32_t> tokens, std::vector<int32_t> blocks)
    : pool_(pool), tokens_(std::move(tokens)), blocks_(std::move(blocks)) {
  check(blocks_.size() * size_t(pool_->block_size()) >= tokens_.size(),
        "KvCells: too few blocks for the tokens");
}

KvCells::KvCells(KvCells&& o) noexcept
    : pool_(o.pool_), tokens_(std::move(o.tokens_)), blocks_(std::move(o.blocks_)) {
  o.tokens_.clear();
  o.blocks_.clear();
}

KvCells& KvCells::operator=(KvCells&& o) noexcept {
  if (this != &o) {
    release_all();
    pool_ = o.pool_;
    tokens_ = std::move(o.tokens_);
    blocks_ = std::move(o.blocks_);
    o.tokens_.clear();
    o.blocks_.clear();
  }
  return *this;
}

KvCells KvCells::share() const {
  for (int32_t b : blocks_) pool_->retain(b);
  return KvCells(pool_, tokens_, blocks_);
}

KvCell KvCells::cell(int pos) const {
  check(pos >= 0 && pos < int(blocks_.size()) * pool_->block_size(),
        "KvCells: position " + std::to_string(pos) + " has no cell");
  const int bs = pool_->block_size();
  return {blocks_[size_t(pos / bs)], pos % bs};
}

void KvCells::reserve(int from, int to, bool keep_all_rows) {
  const int bs = pool_->block_size();
  const size_t need = size_t((to + bs - 1) / bs);
  for (size_t b = size_t(from / bs); b < std::min(need, blocks_.size()); ++b) {
    if (pool_->refcount(blocks_[b]) > 1) {
      // Copy-on-write: only rows before `from` in this block hold data worth keeping.
      const int keep = keep_all_rows ? bs : std::max(0, std::min(bs, from - int(b) * bs));
      const int32_t copy = pool_->copy_block(blocks_[b], keep);
      pool_->release(blocks_[b]);
      blocks_[b] = copy;
    }
  }
  while (blocks_.size() < need) blocks_.push_back(pool_->allocate());
}

void KvCells::push(std::span<const int32_t> tokens) {
  check((tokens_.size() + tokens.size()) <= blocks_.size() * size_t(pool_->block_size()),
        "KvCells: tokens pushed without reserved cells");
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
}

void KvCells::truncate(int n) {
  check(n >= 0 && n <= size(),
        "KvCells: truncate to " + std::to_string(n) + " of " + std::to_string(size()));
  tokens_.resize(size_t(n));
  const int bs = pool_->block_size();
  const size_t keep_blocks = size_t((n + bs - 1) / bs);
  while (blocks_.size() > keep_blocks) {
    pool_->release(blocks_.back());
    blocks_.pop_back();
  }
}

void KvCells::erase(int begin, int end) {
  check(0 <= begin && begin <= end && end <= size(), "KvCells: erase outside the sequence");
  tokens_.erase(tokens_.begin() + begin, tokens_.begin() + end);
  truncate(size());
}

void KvCells::release_all() {
  for (int32_t b : blocks_) pool_->release(b);
  blocks_.clear();
  tokens_.clear();
}

}  // namespace fak
