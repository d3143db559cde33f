// Prefix cache on a hybrid (Gated DeltaNet) model: a hit restarts from a cold state checkpoint
// stored in the tree and is bit-identical to a cold prefill of the whole prompt (logits, state,
// and everything the session computes afterwards); checkpoints count in the byte budget.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "runtime/prefix_cache.h"
#include "test_util.h"

namespace fak {

using test::bit_equal;
using test::cat;
using test::random_ids;

namespace {

class HybridPrefixCache : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model = Model::load(test::data_path("oracle/" + GetParam()), {.load_tokenizer = false});
    cache = std::make_shared<KvCache>(model->n_attention_layers(), model->config().n_kv_heads,
                                      model->config().head_dim, KvCacheOptions{.block_size = 16});
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
    return RecurrentState(model->config().recurrent_shape()).bytes() +
           size_t(vocab) * sizeof(float);
  }
  std::shared_ptr<const Model> model;
  std::shared_ptr<KvCache> cache;
  int vocab = 0;
};

}  // namespace

TEST_P(HybridPrefixCache, HitIsBitIdenticalToColdPrefill) {
  PrefixCache pc(model, cache, 64 << 20);
  auto system = random_ids(300, vocab, 1);
  auto turn1 = cat(system, random_ids(9, vocab, 2)), turn2 = cat(system, random_ids(23, vocab, 3));
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
  for (int32_t t : random_ids(5, vocab, 4)) {
    b.append({&t, 1});
    ref.append({&t, 1});
  }
  auto more = random_ids(140, vocab, 5);
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
TEST_P(HybridPrefixCache, RestartsFromTheNearestCheckpointBelowTheMatch) {
  PrefixCache pc(model, cache, 64 << 20);
  auto base = random_ids(300, vocab, 6);
  Session a = pc.acquire("t", base);
  int reused = -1;
  auto short_match = cat({base.begin(), base.begin() + 100}, random_ids(40, vocab, 7));
  Session b = pc.acquire("t", short_match, &reused);
  EXPECT_EQ(reused, 0);
  Session ref_b = cold(short_match);
  expect_same(b, ref_b, "match below the first checkpoint");
  auto mid_match = cat({base.begin(), base.begin() + 200}, random_ids(40, vocab, 8));
  Session c = pc.acquire("t", mid_match, &reused);
  EXPECT_EQ(reused, 128);
  Session ref_c = cold(mid_match);
  expect_same(c, ref_c, "match between checkpoints");
}

// An agent's next turn resends its history (prompt + reply + tool output): the reply was decoded
// token by token, so only the prompt's checkpoints are cold; the hit restarts from the last one.
TEST_P(HybridPrefixCache, AgentTurnReusesThePreviousPrompt) {
  PrefixCache pc(model, cache, 64 << 20);
  auto turn1 = random_ids(270, vocab, 9);
  Session a = pc.acquire("t", turn1);
  std::vector<int32_t> reply;
  for (int i = 0; i < 12; ++i) {
    int32_t t = int32_t((i * 31 + 5) % vocab);
    a.append({&t, 1});
    reply.push_back(t);
  }
  pc.insert("t", a);  // as the server does when the request finishes
  auto turn2 = cat(cat(turn1, reply), random_ids(60, vocab, 10));
  int reused = -1;
  Session b = pc.acquire("t", turn2, &reused);
  EXPECT_EQ(reused, 256);
  Session ref = cold(turn2);
  expect_same(b, ref, "next turn");
}

TEST_P(HybridPrefixCache, CheckpointsCountInTheBudget) {
  // Room for one prompt's 8 blocks and one checkpoint, not two.
  const size_t budget = 8 * cache->block_bytes() + checkpoint_bytes() + 1000;
  PrefixCache pc(model, cache, budget);
  auto p1 = random_ids(140, vocab, 11), p2 = random_ids(140, vocab, 12);
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

TEST_P(HybridPrefixCache, PartitionsNeverShare) {
  PrefixCache pc(model, cache, 64 << 20);
  auto prompt = random_ids(200, vocab, 13);
  Session a = pc.acquire("alice", prompt);
  int reused = -1;
  Session b = pc.acquire("bob", prompt, &reused);
  EXPECT_EQ(reused, 0);
  Session c = pc.acquire("alice", prompt, &reused);
  EXPECT_EQ(reused, 128);
}

// The Qwen3.5 hybrid and its MoE sibling (DeltaNet + gated attention + experts).
INSTANTIATE_TEST_SUITE_P(Models, HybridPrefixCache,
                         ::testing::Values("qwen35-hybrid-tiny", "qwen35-moe-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace fak
