// Prefix cache: a hit is bit-identical to a cold prefill; partitions never share; LRU under budget.
#include "runtime/prefix_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "test_util.h"

namespace fak {

namespace {

std::vector<int32_t> ids(int n, uint32_t seed, int vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(size_t(n), 0);
  for (auto& x : v) x = int32_t(rng() % uint32_t(vocab));
  return v;
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

class PrefixCacheTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model = Model::load(GetParam(), {.load_tokenizer = false});
    cache = std::make_shared<KvCache>(model->n_attention_layers(), model->config().kv_dim(),
                                      KvCacheOptions{.block_size = 16});
    vocab = model->config().vocab;
  }
  std::shared_ptr<const Model> model;
  std::shared_ptr<KvCache> cache;
  int vocab = 0;
};

}  // namespace

TEST_P(PrefixCacheTest, HitIsBitIdenticalToColdPrefill) {
  PrefixCache pc(model, cache, 64 << 20);
  auto system = ids(70, 1, vocab);
  auto turn1 = system, turn2 = system;
  auto u1 = ids(9, 2, vocab), u2 = ids(23, 3, vocab);
  turn1.insert(turn1.end(), u1.begin(), u1.end());
  turn2.insert(turn2.end(), u2.begin(), u2.end());
  int reused = -1;
  Session a = pc.acquire("t", turn1, &reused);
  EXPECT_EQ(reused, 0);
  pc.insert("t", a);
  Session b = pc.acquire("t", turn2, &reused);
  EXPECT_EQ(reused, 64);  // 4 whole blocks of the 70-token system prompt
  Session cold(model, cache);
  cold.append(turn2);
  EXPECT_TRUE(bit_equal(b.logits(), cold.logits()));
  // The same prompt again: everything but the last token's block comes from the cache.
  pc.insert("t", b);
  Session c = pc.acquire("t", turn2, &reused);
  EXPECT_EQ(reused, 80);
  EXPECT_TRUE(bit_equal(c.logits(), cold.logits()));
  auto st = pc.stats();
  EXPECT_EQ(st.lookups, 3);
  EXPECT_EQ(st.hits, 2);
  EXPECT_EQ(st.tokens_reused, 144);
}

TEST_P(PrefixCacheTest, PartitionsNeverShare) {
  PrefixCache pc(model, cache, 64 << 20);
  auto prompt = ids(50, 4, vocab);
  Session a = pc.acquire("alice", prompt);
  pc.insert("alice", a);
  int reused = -1;
  Session b = pc.acquire("bob", prompt, &reused);
  EXPECT_EQ(reused, 0);
  Session c = pc.acquire("alice", prompt, &reused);
  EXPECT_EQ(reused, 48);
}

TEST_P(PrefixCacheTest, EvictsLeastRecentlyUsedUnderBudget) {
  const size_t budget = 6 * cache->block_bytes();
  PrefixCache pc(model, cache, budget);
  auto p1 = ids(64, 5, vocab), p2 = ids(64, 6, vocab);
  {
    Session a = pc.acquire("t", p1);
    pc.insert("t", a);
  }
  {
    Session b = pc.acquire("t", p2);
    pc.insert("t", b);  // 8 blocks > budget of 6: p1's oldest leaves go
  }
  auto st = pc.stats();
  EXPECT_LE(st.bytes, budget);
  EXPECT_GT(st.blocks_evicted, 0);
  int reused = -1;
  Session again = pc.acquire("t", p2, &reused);
  EXPECT_EQ(reused, 48);  // p2 is recent: fully there (minus the last token's block)
  Session cold(model, cache);
  cold.append(p2);
  EXPECT_TRUE(bit_equal(again.logits(), cold.logits()));
}

TEST_P(PrefixCacheTest, CachedBlocksSurviveTheSessionThatMadeThem) {
  PrefixCache pc(model, cache, 64 << 20);
  auto prompt = ids(40, 7, vocab);
  {
    Session a = pc.acquire("t", prompt);
    pc.insert("t", a);
    // The session goes on writing past the cached blocks and even rewrites its middle.
    auto more = ids(10, 8, vocab);
    a.append(more);
    a.evict(5, 20, EvictMode::Exact);
  }
  int reused = -1;
  Session b = pc.acquire("t", prompt, &reused);
  EXPECT_EQ(reused, 32);
  Session cold(model, cache);
  cold.append(prompt);
  EXPECT_TRUE(bit_equal(b.logits(), cold.logits()));
}

INSTANTIATE_TEST_SUITE_P(Models, PrefixCacheTest,
                         ::testing::Values(test::source_path("models/pycoder-6m").string(),
                                           test::data_path("oracle/llama-tiny").string()),
                         [](const auto& info) { return info.index == 0 ? std::string("pycoder") : std::string("llama"); });

}  // namespace fak
