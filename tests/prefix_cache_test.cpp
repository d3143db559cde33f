// Prefix cache: a hit is bit-identical to a cold prefill and reaches the last cached token (not
// only whole blocks); partitions never share; LRU under budget.
#include "runtime/prefix_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <tuple>

#include "test_util.h"

namespace fak {

using test::bit_equal;
using test::random_ids;

namespace {

// Every model on the f32 KV and on the quantised KV types (q8_0, q4_0): a hit must give a cold
// prefill's bits with the same KV type too (quantised rows are written and read deterministically).
class PrefixCacheTest : public ::testing::TestWithParam<std::tuple<std::string, DType>> {
 protected:
  void SetUp() override {
    model = Model::load(std::get<0>(GetParam()), {.load_tokenizer = false});
    cache = std::make_shared<KvCache>(
        model->n_attention_layers(), model->config().n_kv_heads, model->config().head_dim,
        KvCacheOptions{.block_size = 16, .dtype = std::get<1>(GetParam())});
    vocab = model->config().vocab;
  }
  std::shared_ptr<const Model> model;
  std::shared_ptr<KvCache> cache;
  int vocab = 0;
};

}  // namespace

TEST_P(PrefixCacheTest, HitIsBitIdenticalToColdPrefill) {
  PrefixCache pc(model, cache, 64 << 20);
  auto system = random_ids(70, vocab, 1);
  auto turn1 = system, turn2 = system;
  auto u1 = random_ids(9, vocab, 2), u2 = random_ids(23, vocab, 3);
  turn1.insert(turn1.end(), u1.begin(), u1.end());
  turn2.insert(turn2.end(), u2.begin(), u2.end());
  int reused = -1;
  Session a = pc.acquire("t", turn1, &reused);
  EXPECT_EQ(reused, 0);
  pc.insert("t", a);
  Session b = pc.acquire("t", turn2, &reused);
  EXPECT_EQ(reused, 70);  // the whole system prompt: 4 blocks and 6 tokens of the fifth
  Session cold(model, cache);
  cold.append(turn2);
  EXPECT_TRUE(bit_equal(b.logits(), cold.logits()));
  // The same prompt again: everything but the last token (computed for fresh logits).
  pc.insert("t", b);
  Session c = pc.acquire("t", turn2, &reused);
  EXPECT_EQ(reused, 92);
  EXPECT_TRUE(bit_equal(c.logits(), cold.logits()));
  auto st = pc.stats();
  EXPECT_EQ(st.lookups, 3);
  EXPECT_EQ(st.hits, 2);
  EXPECT_EQ(st.tokens_reused, 162);
}

TEST_P(PrefixCacheTest, PartitionsNeverShare) {
  PrefixCache pc(model, cache, 64 << 20);
  auto prompt = random_ids(50, vocab, 4);
  Session a = pc.acquire("alice", prompt);
  pc.insert("alice", a);
  int reused = -1;
  Session b = pc.acquire("bob", prompt, &reused);
  EXPECT_EQ(reused, 0);
  Session c = pc.acquire("alice", prompt, &reused);
  EXPECT_EQ(reused, 49);
}

TEST_P(PrefixCacheTest, EvictsLeastRecentlyUsedUnderBudget) {
  const size_t budget = 6 * cache->block_bytes();
  PrefixCache pc(model, cache, budget);
  auto p1 = random_ids(64, vocab, 5), p2 = random_ids(64, vocab, 6);
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
  EXPECT_EQ(reused, 63);  // p2 is recent: fully there (minus the last token)
  Session cold(model, cache);
  cold.append(p2);
  EXPECT_TRUE(bit_equal(again.logits(), cold.logits()));
}

TEST_P(PrefixCacheTest, CachedBlocksSurviveTheSessionThatMadeThem) {
  PrefixCache pc(model, cache, 64 << 20);
  auto prompt = random_ids(40, vocab, 7);
  {
    Session a = pc.acquire("t", prompt);
    pc.insert("t", a);
    // The session goes on writing past the cached blocks and even rewrites its middle.
    auto more = random_ids(10, vocab, 8);
    a.append(more);
    a.evict(5, 20, EvictMode::Exact);
  }
  int reused = -1;
  Session b = pc.acquire("t", prompt, &reused);
  EXPECT_EQ(reused, 39);
  Session cold(model, cache);
  cold.append(prompt);
  EXPECT_TRUE(bit_equal(b.logits(), cold.logits()));
}

// llama-tiny's heads (16 wide) are narrower than a quantised KV block (32): f32 KV only.
INSTANTIATE_TEST_SUITE_P(
    Models, PrefixCacheTest,
    ::testing::Values(std::tuple{test::source_path("models/pycoder-6m").string(), DType::F32},
                      std::tuple{test::source_path("models/pycoder-6m").string(), DType::Q8_0},
                      std::tuple{test::source_path("models/pycoder-6m").string(), DType::Q4_0},
                      std::tuple{test::data_path("oracle/llama-tiny").string(), DType::F32},
                      std::tuple{test::data_path("oracle/qwen3-moe-tiny").string(), DType::F32},
                      std::tuple{test::data_path("oracle/qwen3-moe-tiny").string(), DType::Q8_0},
                      std::tuple{test::data_path("oracle/qwen3-moe-tiny").string(), DType::Q4_0}),
    [](const auto& info) {
      const std::string path = std::get<0>(info.param);
      const std::string model = path.find("pycoder") != std::string::npos ? "pycoder"
                                : path.find("llama") != std::string::npos ? "llama"
                                                                          : "qwen3_moe";
      const DType t = std::get<1>(info.param);
      return model + (t == DType::F32 ? "" : t == DType::Q8_0 ? "_q8kv" : "_q4kv");
    });

}  // namespace fak
