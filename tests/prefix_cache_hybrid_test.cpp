// Prefix cache on a hybrid (Gated DeltaNet) model: a hit restarts from a cold state checkpoint
// stored in the tree and is bit-identical to a cold prefill of the whole prompt (logits, state,
// and everything the session computes afterwards); checkpoints count in the byte budget.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "runtime/prefix_cache.h"
#include "test_util.h"

namespace fak {

namespace {

std::vector<int32_t> ids(int n, uint32_t seed, int vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(size_t(n), 0);
  for (auto& x : v) x = int32_t(rng() % uint32_t(vocab));
  return v;
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

class HybridPrefixCache : public ::testing::Test {
 protected:
  void SetUp() override {
    model = Model::load(test::data_path("oracle/qwen35-hybrid-tiny"), {.load_tokenizer = false});
    cache = std::make_shared<KvCache>(model->n_attention_layers(), model->config().kv_dim(),
                                      KvCacheOptions{.block_size = 16});
    vocab = model->config().vocab;
  }
  // The reference: one cold append of the whole prompt.
  Session cold(const std::vector<int32_t>& prompt) {
    Session s(model, cache);
    s.append(prompt);
    return s;
  }
  void expect_same(Session& got, Session& want, const std::string& what) {
    EXPECT_EQ(got.tokens(), want.tokens()) << what;
    EXPECT_EQ(got.segment_starts(), want.segment_starts()) << what;
    EXPECT_TRUE(*got.recurrent_state() == *want.recurrent_state()) << what << ": state differs";
    EXPECT_TRUE(bit_equal(got.logits(), want.logits())) << what << ": logits differ";
  }
  size_t checkpoint_bytes() const {
    return RecurrentState(model->config()).bytes() + size_t(vocab) * sizeof(float);
  }
  std::shared_ptr<const Model> model;
  std::shared_ptr<KvCache> cache;
  int vocab = 0;
};

}  // namespace

TEST_F(HybridPrefixCache, HitIsBitIdenticalToColdPrefill) {
  PrefixCache pc(model, cache, 64 << 20);
  auto system = ids(300, 1, vocab);
  auto turn1 = cat(system, ids(9, 2, vocab)), turn2 = cat(system, ids(23, 3, vocab));
  int reused = -1;
  Session a = pc.acquire("t", turn1, &reused);
  EXPECT_EQ(reused, 0);
  // The prompt's cold checkpoints (128, 256) are in the tree already, with the blocks up to 256.
  auto st = pc.stats();
  EXPECT_EQ(st.checkpoints, 2u);
  EXPECT_EQ(st.blocks, 16u);
  EXPECT_EQ(st.checkpoint_bytes, 2 * checkpoint_bytes());
  EXPECT_EQ(st.bytes, 16 * cache->block_bytes() + 2 * checkpoint_bytes());

  Session b = pc.acquire("t", turn2, &reused);
  EXPECT_EQ(reused, 256);
  Session ref = cold(turn2);
  expect_same(b, ref, "hit");
  // Whatever the session does next computes what the cold one does.
  for (int32_t t : ids(5, 4, vocab)) {
    b.append({&t, 1});
    ref.append({&t, 1});
  }
  auto more = ids(140, 5, vocab);
  b.append(more);
  ref.append(more);
  expect_same(b, ref, "after decoding and another append");
  b.truncate(290);
  ref.truncate(290);
  expect_same(b, ref, "truncated below the restored checkpoint");
  st = pc.stats();
  EXPECT_EQ(st.hits, 1);
  EXPECT_EQ(st.tokens_reused, 256);
}

// A match shorter than the first checkpoint reuses nothing (no state to restart from) and is
// still a plain cold prefill; a match between checkpoints restarts from the one below it.
TEST_F(HybridPrefixCache, RestartsFromTheNearestCheckpointBelowTheMatch) {
  PrefixCache pc(model, cache, 64 << 20);
  auto base = ids(300, 6, vocab);
  Session a = pc.acquire("t", base);
  int reused = -1;
  auto short_match = cat({base.begin(), base.begin() + 100}, ids(40, 7, vocab));
  Session b = pc.acquire("t", short_match, &reused);
  EXPECT_EQ(reused, 0);
  Session ref_b = cold(short_match);
  expect_same(b, ref_b, "match below the first checkpoint");
  auto mid_match = cat({base.begin(), base.begin() + 200}, ids(40, 8, vocab));
  Session c = pc.acquire("t", mid_match, &reused);
  EXPECT_EQ(reused, 128);
  Session ref_c = cold(mid_match);
  expect_same(c, ref_c, "match between checkpoints");
}

// An agent's next turn resends its history (prompt + reply + tool output): the reply was decoded
// token by token, so only the prompt's checkpoints are cold; the hit restarts from the last one.
TEST_F(HybridPrefixCache, AgentTurnReusesThePreviousPrompt) {
  PrefixCache pc(model, cache, 64 << 20);
  auto turn1 = ids(270, 9, vocab);
  Session a = pc.acquire("t", turn1);
  std::vector<int32_t> reply;
  for (int i = 0; i < 12; ++i) {
    int32_t t = int32_t((i * 31 + 5) % vocab);
    a.append({&t, 1});
    reply.push_back(t);
  }
  pc.insert("t", a);  // as the server does when the request finishes
  auto turn2 = cat(cat(turn1, reply), ids(60, 10, vocab));
  int reused = -1;
  Session b = pc.acquire("t", turn2, &reused);
  EXPECT_EQ(reused, 256);
  Session ref = cold(turn2);
  expect_same(b, ref, "next turn");
}

TEST_F(HybridPrefixCache, CheckpointsCountInTheBudget) {
  // Room for one prompt's 8 blocks and one checkpoint, not two.
  const size_t budget = 8 * cache->block_bytes() + checkpoint_bytes() + 1000;
  PrefixCache pc(model, cache, budget);
  auto p1 = ids(140, 11, vocab), p2 = ids(140, 12, vocab);
  { Session a = pc.acquire("t", p1); }
  { Session b = pc.acquire("t", p2); }
  auto st = pc.stats();
  EXPECT_LE(st.bytes, budget);
  EXPECT_EQ(st.checkpoints, 1u);
  EXPECT_EQ(st.checkpoints_evicted, 1);
  EXPECT_EQ(st.blocks, 8u) << "p1's blocks go with its checkpoint";
  int reused = -1;
  Session again = pc.acquire("t", p2, &reused);
  EXPECT_EQ(reused, 128);
  Session ref = cold(p2);
  expect_same(again, ref, "after eviction");
  Session old = pc.acquire("t", p1, &reused);
  EXPECT_EQ(reused, 0);
  pc.clear();
  st = pc.stats();
  EXPECT_EQ(st.checkpoints, 0u);
  EXPECT_EQ(st.checkpoint_bytes, 0u);
}

TEST_F(HybridPrefixCache, PartitionsNeverShare) {
  PrefixCache pc(model, cache, 64 << 20);
  auto prompt = ids(200, 13, vocab);
  Session a = pc.acquire("alice", prompt);
  int reused = -1;
  Session b = pc.acquire("bob", prompt, &reused);
  EXPECT_EQ(reused, 0);
  Session c = pc.acquire("alice", prompt, &reused);
  EXPECT_EQ(reused, 128);
}

}  // namespace fak
