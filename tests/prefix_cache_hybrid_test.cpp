// Prefix cache on a hybrid (Gated DeltaNet) model: a hit restarts from a state checkpoint stored in
// the tree, at any token, and is bit-identical to a cold prefill of the whole prompt (logits,
// state, and everything the session computes afterwards); checkpoints live in KV blocks and are
// priced against them by the eviction policy.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "runtime/prefix_cache.h"
#include "runtime/sampler.h"
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
    EXPECT_TRUE(*got.recurrent_state() == *want.recurrent_state()) << what << ": state differs";
    EXPECT_TRUE(bit_equal(got.logits(), want.logits())) << what << ": logits differ";
  }
  // KV blocks one checkpoint occupies.
  size_t checkpoint_blocks() const {
    return StateCheckpoint::blocks_for(
        *cache,
        RecurrentState(model->config().recurrent_shape()).bytes() + size_t(vocab) * sizeof(float));
  }
  std::vector<int32_t> greedy(Session& s, int n) {
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
      const int32_t t = argmax(s.logits());
      out.push_back(t);
      s.append({&t, 1});
    }
    return out;
  }
  std::shared_ptr<const Model> model;
  std::shared_ptr<KvCache> cache;
  int vocab = 0;
};

}  // namespace

// Three requests over one system prompt: the first leaves a checkpoint at its end, the second
// leaves the cached tokens at 300 (inside a block) and so takes a checkpoint there for the cache,
// and the third restarts exactly at 300.
TEST_P(HybridPrefixCache, HitIsBitIdenticalToColdPrefill) {
  PrefixCache pc(model, cache, 64 << 20);
  auto system = random_ids(300, vocab, 1);
  auto turn1 = cat(system, random_ids(9, vocab, 2)), turn2 = cat(system, random_ids(23, vocab, 3)),
       turn3 = cat(system, random_ids(17, vocab, 33));
  int reused = -1;
  Session a = pc.acquire("t", turn1, &reused);
  EXPECT_EQ(reused, 0);
  auto st = pc.stats();
  EXPECT_EQ(st.checkpoints, 1u);  // at 309, on a tail of 5 tokens after 19 whole blocks
  EXPECT_EQ(st.blocks, 20u);
  EXPECT_EQ(st.checkpoint_bytes, checkpoint_blocks() * cache->block_bytes());
  EXPECT_EQ(st.bytes, (20 + checkpoint_blocks()) * cache->block_bytes());

  std::vector<int> wishes;
  Session b = pc.acquire("t", turn2, &reused, /*prefill_rest=*/false, &wishes);
  EXPECT_EQ(reused, 0) << "no checkpoint at or below where turn2 leaves the tree";
  EXPECT_EQ(wishes, std::vector<int>{300});
  b.append({turn2.data(), 300});
  b.checkpoint();
  b.append({turn2.data() + 300, turn2.size() - 300});
  b.checkpoint();
  pc.insert("t", b);
  Session ref2 = cold(turn2);
  expect_same(b, ref2, "cold with a checkpoint taken on the way");

  Session c = pc.acquire("t", turn3, &reused);
  EXPECT_EQ(reused, 300);
  Session ref = cold(turn3);
  expect_same(c, ref, "hit");
  // Whatever the session does next computes what the cold one does.
  for (int32_t t : random_ids(5, vocab, 4)) {
    c.append({&t, 1});
    ref.append({&t, 1});
  }
  auto more = random_ids(140, vocab, 5);
  c.append(more);
  ref.append(more);
  expect_same(c, ref, "after decoding and another append");
  c.truncate(290);
  ref.truncate(290);
  expect_same(c, ref, "truncated below the restored checkpoint");
  st = pc.stats();
  EXPECT_EQ(st.hits, 1);
  EXPECT_EQ(st.checkpoint_hits, 1);
  EXPECT_EQ(st.tokens_reused, 300);
}

// An agent's next turn resends its whole history (prompt + reply + tool output): the checkpoint
// taken at the end of the request (after its reply) makes the hit reach the last token.
TEST_P(HybridPrefixCache, AgentTurnReusesTheWholePreviousContext) {
  PrefixCache pc(model, cache, 64 << 20);
  std::vector<int32_t> history = random_ids(270, vocab, 9);
  Session a = pc.acquire("t", history);
  for (int turn = 0; turn < 3; ++turn) {
    const std::vector<int32_t> reply = greedy(a, 12);
    a.checkpoint();     // as the server does when a request ends
    pc.insert("t", a);  // ... and offers it to the cache
    history = cat(cat(history, reply), random_ids(40, vocab, 10 + uint32_t(turn)));
    int reused = -1;
    a = pc.acquire("t", history, &reused);
    EXPECT_EQ(reused, int(history.size()) - 40) << "turn " << turn;
    Session ref = cold(history);
    expect_same(a, ref, "turn " + std::to_string(turn));
  }
}

// The same prompt again: the checkpoint at its end brings the logits, nothing is prefilled.
TEST_P(HybridPrefixCache, AWholePromptHitNeedsNoForwardCall) {
  PrefixCache pc(model, cache, 64 << 20);
  auto prompt = random_ids(77, vocab, 14);
  Session a = pc.acquire("t", prompt);
  int reused = -1;
  Session b = pc.acquire("t", prompt, &reused);
  EXPECT_EQ(reused, 77);
  Session ref = cold(prompt);
  expect_same(b, ref, "whole prompt");
  EXPECT_EQ(greedy(b, 5), greedy(ref, 5));
}

// A match restarts from the deepest checkpoint below it; the prompt's own checkpoints along the way
// (every checkpoint_every tokens, and where it leaves the tree) serve the next ones.
TEST_P(HybridPrefixCache, RestartsFromTheNearestCheckpointBelowTheMatch) {
  PrefixCache pc(model, cache, 64 << 20, /*checkpoint_every=*/128);
  auto base = random_ids(300, vocab, 6);
  Session a = pc.acquire("t", base);
  EXPECT_EQ(pc.stats().checkpoints, 3u) << "128, 256 and the end";
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
  // short_match left a checkpoint where it diverged (100), mid_match one at 200.
  for (int at : {100, 200}) {
    auto again = cat({base.begin(), base.begin() + at}, random_ids(30, vocab, 9 + uint32_t(at)));
    Session d = pc.acquire("t", again, &reused);
    EXPECT_EQ(reused, at);
    Session ref_d = cold(again);
    expect_same(d, ref_d, "at the divergence " + std::to_string(at));
  }
}

// Checkpoints are KV blocks of the one budget: when a sequence needs blocks, the reclaimer frees
// what is worth least per block. A checkpoint that saves a 5-token reply is worth less than the
// KV of a 300-token prompt and goes first; the prompt's own checkpoint stays.
TEST_P(HybridPrefixCache, CheckpointsArePricedAgainstKvBlocks) {
  const size_t cpb = checkpoint_blocks();
  auto budgeted = std::make_shared<KvCache>(
      model->n_attention_layers(), model->config().n_kv_heads, model->config().head_dim,
      KvCacheOptions{.block_size = 16,
                     .max_bytes = (20 + 2 * cpb + 2) * cache->block_bytes(),
                     .slab_bytes = 1});
  cache = budgeted;
  PrefixCache pc(model, cache, 0);
  auto prompt = random_ids(300, vocab, 21);
  {
    Session a = pc.acquire("t", prompt);  // 19 blocks + a checkpoint at 300
    greedy(a, 5);
    a.checkpoint();  // at 305: saves 5 tokens, holds cpb blocks
    pc.insert("t", a);
  }
  EXPECT_EQ(pc.stats().checkpoints, 2u);
  // A sequence that needs the room of one checkpoint (appended as a batch: no checkpoint of its
  // own at the end).
  Session other(model, cache);
  const auto other_ids = random_ids(16 * int(cpb) - 8, vocab, 22);
  Session* others[1] = {&other};
  const std::span<const int32_t> spans[1] = {other_ids};
  append_batch(others, spans);
  auto st = pc.stats();
  EXPECT_EQ(st.checkpoints, 1u);
  EXPECT_GE(st.checkpoints_evicted, 1);
  int reused = -1;
  auto next = cat(prompt, random_ids(10, vocab, 23));
  Session b = pc.acquire("t", next, &reused);
  EXPECT_EQ(reused, 300) << "the prompt's checkpoint stayed";
  Session ref(model,
              std::make_shared<KvCache>(model->n_attention_layers(), model->config().n_kv_heads,
                                        model->config().head_dim));
  ref.append(next);
  expect_same(b, ref, "after the reclaim");
}

// The cache's own cap counts checkpoints too.
TEST_P(HybridPrefixCache, CheckpointsCountInTheCap) {
  const size_t one = checkpoint_blocks() * cache->block_bytes();
  // Room for one prompt's 9 blocks and one checkpoint, not two.
  const size_t budget = 9 * cache->block_bytes() + one + 1000;
  PrefixCache pc(model, cache, budget);
  auto p1 = random_ids(140, vocab, 11), p2 = random_ids(140, vocab, 12);
  { Session a = pc.acquire("t", p1); }
  { Session b = pc.acquire("t", p2); }
  auto st = pc.stats();
  EXPECT_LE(st.bytes, budget);
  EXPECT_EQ(st.checkpoints, 1u);
  EXPECT_EQ(st.checkpoints_evicted, 1);
  EXPECT_EQ(st.blocks, 9u) << "p1's blocks go with its checkpoint";
  int reused = -1;
  Session again = pc.acquire("t", p2, &reused);
  EXPECT_EQ(reused, 140);
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
  EXPECT_EQ(reused, 200);
}

// The Qwen3.5 hybrid and its MoE sibling (DeltaNet + gated attention + experts).
INSTANTIATE_TEST_SUITE_P(Models, HybridPrefixCache,
                         ::testing::Values("qwen35-hybrid-tiny", "qwen35-moe-tiny"),
                         [](const auto& info) { return test::fixture_name(info.param); });

}  // namespace fak
