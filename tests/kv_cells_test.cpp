// KvCells alone: cell bookkeeping over a pool that holds no KV, only reference counts and a log of
// copies, so ownership, copy-on-write, truncation and span removal are checked without a model.
#include "memory/kv_cells.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "core/error.h"

namespace fak {
namespace {

class CountingPool : public BlockPool {
 public:
  explicit CountingPool(int block_size) : bs_(block_size) {}
  int block_size() const override { return bs_; }
  int32_t allocate() override {
    const int32_t b = next_++;
    refs_[b] = 1;
    return b;
  }
  void retain(int32_t b) override { ++refs_.at(b); }
  void release(int32_t b) override {
    if (--refs_.at(b) == 0) refs_.erase(b);
  }
  int refcount(int32_t b) const override { return refs_.at(b); }
  int32_t copy_block(int32_t src, int n_rows) override {
    copies.push_back({src, n_rows});
    return allocate();
  }
  size_t live() const { return refs_.size(); }
  struct Copy {
    int32_t src;
    int rows;
  };
  std::vector<Copy> copies;

 private:
  int bs_;
  int32_t next_ = 0;
  std::map<int32_t, int> refs_;
};

std::vector<int32_t> iota(int n, int from = 100) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(from + i);
  return v;
}

void append(KvCells& c, const std::vector<int32_t>& t) {
  c.reserve(c.size(), c.size() + int(t.size()));
  c.push(t);
}

TEST(KvCells, PositionsMapToBlockAndSlot) {
  CountingPool pool(4);
  KvCells c(&pool);
  append(c, iota(10));
  EXPECT_EQ(c.size(), 10);
  EXPECT_EQ(c.blocks().size(), 3u);
  EXPECT_EQ(c.cell(0).block, c.blocks()[0]);
  EXPECT_EQ(c.cell(5).block, c.blocks()[1]);
  EXPECT_EQ(c.cell(5).slot, 1);
  EXPECT_EQ(c.tokens()[9], 109);
  EXPECT_EQ(c.owners(9), 1);
  EXPECT_THROW(c.cell(12), Error);
}

TEST(KvCells, ShareAddsOwnersAndWritesCopyOnlyTheSharedBlock) {
  CountingPool pool(4);
  KvCells a(&pool);
  append(a, iota(6));  // blocks: [0..3] full, [4..5] partial
  KvCells b = a.share();
  EXPECT_EQ(pool.live(), 2u);
  EXPECT_EQ(a.owners(0), 2);
  EXPECT_EQ(b.tokens(), a.tokens());
  // b continues in the partial block: that block is copied with its 2 rows, the full one stays
  // shared.
  append(b, {7, 8});
  ASSERT_EQ(pool.copies.size(), 1u);
  EXPECT_EQ(pool.copies[0].src, a.blocks()[1]);
  EXPECT_EQ(pool.copies[0].rows, 2);
  EXPECT_EQ(b.blocks()[0], a.blocks()[0]);
  EXPECT_NE(b.blocks()[1], a.blocks()[1]);
  EXPECT_EQ(a.owners(1), 2);
  EXPECT_EQ(a.owners(5), 1);
  EXPECT_EQ(a.size(), 6);
  EXPECT_EQ(b.size(), 8);
}

TEST(KvCells, TruncateAndEraseReleaseTrailingBlocks) {
  CountingPool pool(4);
  {
    KvCells a(&pool);
    append(a, iota(11));
    KvCells keep = a.share();
    a.truncate(5);
    EXPECT_EQ(a.size(), 5);
    EXPECT_EQ(a.blocks().size(), 2u);
    EXPECT_EQ(keep.owners(10), 1);  // the third block is keep's alone now
    EXPECT_EQ(keep.owners(0), 2);
    // Removing [1, 3) moves positions 3.. down by two: tokens 100, 103, 104.
    a.erase(1, 3);
    EXPECT_EQ(a.tokens(), (std::vector<int32_t>{100, 103, 104}));
    EXPECT_EQ(a.blocks().size(), 1u);
    EXPECT_EQ(pool.live(), 3u);
  }
  EXPECT_EQ(pool.live(), 0u);  // every owner gone: every block freed
}

TEST(KvCells, MoveTransfersOwnership) {
  CountingPool pool(2);
  KvCells a(&pool);
  append(a, iota(3));
  KvCells b(std::move(a));
  EXPECT_EQ(b.size(), 3);
  KvCells c(&pool);
  append(c, iota(5));
  c = std::move(b);  // c's old blocks are released
  EXPECT_EQ(pool.live(), 2u);
  EXPECT_THROW(c.push(iota(2)), Error);  // cells must be reserved first
}

TEST(KvCells, AdoptingTooFewBlocksIsRefused) {
  CountingPool pool(4);
  std::vector<int32_t> blocks{pool.allocate()};
  EXPECT_THROW(KvCells(&pool, iota(5), blocks), Error);
  pool.release(blocks[0]);
}

}  // namespace
}  // namespace fak
