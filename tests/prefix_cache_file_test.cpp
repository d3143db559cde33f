// Prefix cache on disk: spill, then reload into a fresh KV cache (a restarted server) gives the
// same hits with bit-identical KV and logits; a shared prefix is written once; what does not fit
// (the disk cap, the KV budget) is the least valuable; damaged, truncated and foreign files are
// skipped with a warning naming them; a full disk is a warning; partitions can be refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <optional>

#include "runtime/prefix_cache.h"
#include "test_util.h"

namespace fak {

using test::bit_equal;
using test::cat;
using test::joined;
using test::kv_bytes;
using test::random_ids;

namespace {

std::vector<std::filesystem::path> files_in(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".fakprefix") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

class PrefixCacheFileTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model = Model::load(GetParam(), {.load_tokenizer = false});
    vocab = model->config().vocab;
    dir = test::temp_dir() / "cache";
    std::filesystem::create_directories(dir);
  }
  // A KV cache of its own, as a restarted server has; max_blocks: its budget (0: none), one block
  // per slab so that the budget is exact.
  std::shared_ptr<KvCache> new_cache(size_t max_blocks = 0, DType dtype = DType::F32) {
    KvCacheOptions o{.block_size = 16, .dtype = dtype};
    auto probe = std::make_shared<KvCache>(model->n_attention_layers(), model->config().n_kv_heads,
                                           model->config().head_dim, o);
    if (max_blocks) {
      o.slab_bytes = probe->block_bytes();
      o.max_bytes = max_blocks * probe->block_bytes();
    }
    return std::make_shared<KvCache>(model->n_attention_layers(), model->config().n_kv_heads,
                                     model->config().head_dim, o);
  }
  std::shared_ptr<const Model> model;
  int vocab = 0;
  std::filesystem::path dir;
};

}  // namespace

TEST_P(PrefixCacheFileTest, ReloadGivesTheSameHitsBitIdentical) {
  auto system = random_ids(70, vocab, 1);
  auto turn1 = cat(system, random_ids(30, vocab, 2)), turn2 = cat(system, random_ids(40, vocab, 3));
  auto cache = new_cache();
  PrefixCache pc(model, cache, 64 << 20);
  {
    Session a = pc.acquire("t", turn1);
    pc.insert("t", a);
    Session b = pc.acquire("t", turn2);
    pc.insert("t", b);
  }
  int before = -1;
  Session hit = pc.acquire("t", turn2, &before);
  EXPECT_EQ(before, 109);  // all of turn2 but its last token
  const PrefixCacheStats st = pc.stats();
  // 4 blocks of the shared system prompt, then 2 whole blocks and a tail of each turn below them.
  EXPECT_EQ(st.blocks, 10u);
  const PrefixCacheFileReport w = pc.spill(dir, 0);
  EXPECT_TRUE(w.warnings.empty()) << joined(w.warnings);
  EXPECT_EQ(w.files, 1);
  EXPECT_EQ(w.blocks, 10u) << "the shared prefix is written once";
  // The file is its blocks' KV (the tails' 4 and 14 rows only) and little else.
  const auto files = files_in(dir);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(std::filesystem::file_size(files[0]), w.bytes);
  EXPECT_LT(w.bytes, (8 * 16 + 18) * (cache->block_bytes() / 16) + 10 * (28 + 64) + 1024);

  auto cache2 = new_cache();
  PrefixCache pc2(model, cache2, 64 << 20);
  const PrefixCacheFileReport r = pc2.reload(dir);
  EXPECT_TRUE(r.warnings.empty()) << joined(r.warnings);
  EXPECT_EQ(r.files, 1);
  EXPECT_EQ(r.blocks, 10u);
  EXPECT_EQ(r.dropped_blocks, 0u);
  EXPECT_EQ(pc2.stats().blocks, 10u);
  int after = -1;
  Session again = pc2.acquire("t", turn2, &after);
  EXPECT_EQ(after, before);
  EXPECT_EQ(kv_bytes(again, 6), kv_bytes(hit, 6));
  Session cold(model, cache2);
  cold.append(turn2);
  EXPECT_TRUE(bit_equal(again.logits(), cold.logits()));
  EXPECT_TRUE(bit_equal(hit.logits(), cold.logits()));
  // What the session computes next is what the cold one computes.
  auto more = random_ids(20, vocab, 4);
  again.append(more);
  cold.append(more);
  EXPECT_TRUE(bit_equal(again.logits(), cold.logits()));
  EXPECT_EQ(kv_bytes(again, 8), kv_bytes(cold, 8));
  // The other turn's branch came back too.
  Session t1 = pc2.acquire("t", turn1, &after);
  EXPECT_EQ(after, 99);
}

TEST_P(PrefixCacheFileTest, ReloadTakesTheMostValuableThatTheBudgetHolds) {
  auto cache = new_cache();
  PrefixCache pc(model, cache, 64 << 20);
  auto hot = random_ids(65, vocab, 5), cold_prompt = random_ids(65, vocab, 6);
  {
    Session a = pc.acquire("t", cold_prompt);
    pc.insert("t", a);
  }
  for (int i = 0; i < 3; ++i) {  // an agent resending its prefix: used 3 times
    Session a = pc.acquire("t", hot);
    pc.insert("t", a);
  }
  {
    Session b = pc.acquire("t", cold_prompt);  // the most recent, but used twice only
    pc.insert("t", b);
  }
  EXPECT_EQ(pc.spill(dir, 0).blocks, 10u);  // each prompt: 4 whole blocks and a tail of 1
  // A budget of 11 blocks, 5 of them held by a sequence: room for 6, the most valuable: the hot
  // prompt's 4 whole blocks and the other's first 2 (each prompt's tail, used once, goes first).
  auto small = new_cache(11);
  PrefixCache pc2(model, small, 0);
  std::optional<Session> running(std::in_place, model, small);
  running->append(random_ids(80, vocab, 9));
  ASSERT_EQ(small->blocks_in_use(), 5u);
  const PrefixCacheFileReport r = pc2.reload(dir);
  EXPECT_EQ(r.blocks, 6u);
  EXPECT_EQ(r.dropped_blocks, 4u);
  EXPECT_EQ(small->blocks_in_use(), 11u);
  running.reset();
  int reused = -1;
  {
    Session a = pc2.acquire("t", hot, &reused);
    EXPECT_EQ(reused, 64);
    Session ref(model, new_cache());
    ref.append(hot);
    EXPECT_TRUE(bit_equal(a.logits(), ref.logits()));
  }
  Session b = pc2.acquire("t", cold_prompt, &reused);
  EXPECT_EQ(reused, 32);
}

TEST_P(PrefixCacheFileTest, DiskCapLeavesOutTheLeastValuable) {
  auto cache = new_cache();
  PrefixCache pc(model, cache, 64 << 20);
  auto hot = random_ids(65, vocab, 7), once = random_ids(65, vocab, 8);
  for (int i = 0; i < 3; ++i) {
    Session a = pc.acquire("alice", hot);
    pc.insert("alice", a);
  }
  {
    Session b = pc.acquire("bob", once);
    pc.insert("bob", b);
  }
  // Room for 6 blocks (a tail counted as a whole one): alice's 4 whole blocks, then bob's first 2
  // (each prompt's tail, used once, goes first).
  const size_t node = 28 + 16 * 4 + cache->block_bytes();
  const PrefixCacheFileReport w = pc.spill(dir, 2 * 600 + 6 * node);
  EXPECT_EQ(w.blocks, 6u);
  EXPECT_EQ(w.dropped_blocks, 4u);
  EXPECT_EQ(w.files, 2);
  size_t on_disk = 0;
  for (const auto& f : files_in(dir)) on_disk += std::filesystem::file_size(f);
  EXPECT_LE(on_disk, 2 * 600 + 6 * node);
  auto cache2 = new_cache();
  PrefixCache pc2(model, cache2, 0);
  EXPECT_EQ(pc2.reload(dir).blocks, 6u);
  int reused = -1;
  Session a = pc2.acquire("alice", hot, &reused);
  EXPECT_EQ(reused, 64);
  Session b = pc2.acquire("bob", once, &reused);
  EXPECT_EQ(reused, 32);
}

TEST_P(PrefixCacheFileTest, DamagedAndForeignFilesAreSkippedWithAWarning) {
  auto cache = new_cache();
  PrefixCache pc(model, cache, 64 << 20);
  const std::vector<std::string> names = {"good", "flipped", "truncated", "header"};
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < names.size(); ++i) {
    prompts.push_back(random_ids(40, vocab, 20 + uint32_t(i)));
    Session s = pc.acquire(names[i], prompts.back());
    pc.insert(names[i], s);
  }
  ASSERT_EQ(pc.spill(dir, 0).files, 4);
  // Tell the files apart by the partition named in their headers.
  std::map<std::string, std::filesystem::path> file_of;
  for (const auto& f : files_in(dir)) {
    const std::string bytes = test::read_file(f);
    for (const auto& n : names)
      if (bytes.find("\"partition\":\"" + n + "\"") != std::string::npos) file_of[n] = f;
  }
  ASSERT_EQ(file_of.size(), 4u);
  std::string bytes = test::read_file(file_of["flipped"]);
  bytes[bytes.size() / 2] ^= 1;  // one bit of KV
  test::write_file(file_of["flipped"], bytes);
  bytes = test::read_file(file_of["truncated"]);
  test::write_file(file_of["truncated"], bytes.substr(0, bytes.size() - 100));
  bytes = test::read_file(file_of["header"]);
  const size_t at = bytes.find("\"block_size\":16");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 15, "\"block_size\":32");  // the checksum no longer matches either
  test::write_file(file_of["header"], bytes);
  test::write_file(dir / "junk.fakprefix", "not a prefix cache file at all");
  // A link to a good file is not followed; a writer's stale temp file is removed.
  std::filesystem::create_symlink(file_of["good"], dir / "link.fakprefix");
  test::write_file(dir / ".x.fakprefix.tmp-999999999-0", "partial");

  auto cache2 = new_cache();
  PrefixCache pc2(model, cache2, 0);
  const PrefixCacheFileReport r = pc2.reload(dir);
  EXPECT_EQ(r.files, 1);
  ASSERT_EQ(r.warnings.size(), 4u) << joined(r.warnings);
  const std::string all = joined(r.warnings);
  for (const char* n : {"flipped", "truncated", "header"})
    EXPECT_NE(all.find(file_of[n].string() + " is corrupted or truncated"), std::string::npos)
        << n << "\n"
        << all;
  EXPECT_NE(all.find("junk.fakprefix is not a fak prefix cache file; skipped"), std::string::npos)
      << all;
  EXPECT_FALSE(std::filesystem::exists(dir / ".x.fakprefix.tmp-999999999-0"));
  for (size_t i = 0; i < names.size(); ++i) {
    int reused = -1;
    Session s = pc2.acquire(names[i], prompts[i], &reused);
    EXPECT_EQ(reused, i == 0 ? 39 : 0) << names[i];
    Session ref(model, cache2);
    ref.append(prompts[i]);
    EXPECT_TRUE(bit_equal(s.logits(), ref.logits())) << names[i];
  }
  // The next spill keeps what the cache holds and drops the rest (the link included).
  EXPECT_EQ(pc2.spill(dir, 0).files, 1);
  EXPECT_EQ(files_in(dir).size(), 1u);
}

TEST_P(PrefixCacheFileTest, AnotherModelOrKvLayoutIsRefused) {
  auto cache = new_cache();
  PrefixCache pc(model, cache, 64 << 20);
  auto prompt = random_ids(40, vocab, 30);
  {
    Session s = pc.acquire("t", prompt);
    pc.insert("t", s);
  }
  pc.spill(dir, 0);
  {
    auto f16 = new_cache(0, DType::F16);
    PrefixCache other(model, f16, 0);
    const PrefixCacheFileReport r = other.reload(dir);
    EXPECT_EQ(r.files, 0);
    ASSERT_EQ(r.warnings.size(), 1u);
    EXPECT_NE(r.warnings[0].find("holds f32 KV rows with Kraw, but this cache stores f16"),
              std::string::npos)
        << r.warnings[0];
  }
  const std::string other_path = GetParam().find("pycoder") != std::string::npos
                                     ? test::data_path("oracle/llama-tiny").string()
                                     : test::source_path("models/pycoder-6m").string();
  auto other_model = Model::load(other_path, {.load_tokenizer = false});
  auto other_cache =
      std::make_shared<KvCache>(other_model->n_attention_layers(), other_model->config().n_kv_heads,
                                other_model->config().head_dim, KvCacheOptions{.block_size = 16});
  PrefixCache other(other_model, other_cache, 0);
  const PrefixCacheFileReport r = other.reload(dir);
  EXPECT_EQ(r.files, 0);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("was saved with a different model"), std::string::npos)
      << r.warnings[0];
  EXPECT_EQ(other.stats().blocks, 0u);
}

TEST_P(PrefixCacheFileTest, RefusedPartitionsAreIgnoredThenRemoved) {
  auto cache = new_cache();
  PrefixCache pc(model, cache, 64 << 20);
  auto prompt = random_ids(40, vocab, 31);
  for (const char* p : {"alice", "bob"}) {
    Session s = pc.acquire(p, prompt);
    pc.insert(p, s);
  }
  EXPECT_EQ(pc.spill(dir, 0).files, 2);
  auto cache2 = new_cache();
  PrefixCache pc2(model, cache2, 0);
  const PrefixCacheFileReport r =
      pc2.reload(dir, [](const std::string& partition) { return partition != "bob"; });
  EXPECT_EQ(r.files, 1);
  EXPECT_EQ(r.ignored, 1);
  EXPECT_TRUE(r.warnings.empty());
  int reused = -1;
  { Session s = pc2.acquire("bob", prompt, &reused); }
  EXPECT_EQ(reused, 0);
  { Session s = pc2.acquire("alice", prompt, &reused); }
  EXPECT_EQ(reused, 39);
  EXPECT_EQ(pc2.spill(dir, 0).files, 1);
  EXPECT_EQ(files_in(dir).size(), 1u) << "bob's file is gone";
}

TEST_P(PrefixCacheFileTest, FullDiskIsAWarningAndKeepsThePreviousFile) {
  auto cache = new_cache();
  PrefixCache pc(model, cache, 64 << 20);
  auto p1 = random_ids(40, vocab, 32);
  {
    Session s = pc.acquire("t", p1);
    pc.insert("t", s);
  }
  const PrefixCacheFileReport first = pc.spill(dir, 0);
  ASSERT_EQ(first.files, 1);
  const std::string before = test::read_file(files_in(dir)[0]);
  {
    Session s = pc.acquire("t", random_ids(300, vocab, 33));  // a bigger tree
    pc.insert("t", s);
  }
  PrefixCacheFileReport r;
  const std::string thrown =
      test::error_with_file_size_limit(before.size() + 100, [&] { r = pc.spill(dir, 0); });
  EXPECT_EQ(thrown, "");
  EXPECT_EQ(r.files, 0);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("; not saved"), std::string::npos) << r.warnings[0];
  const auto files = files_in(dir);
  ASSERT_EQ(files.size(), 1u) << "no temp file left";
  EXPECT_EQ(test::read_file(files[0]), before);
}

INSTANTIATE_TEST_SUITE_P(Models, PrefixCacheFileTest,
                         ::testing::Values(test::source_path("models/pycoder-6m").string(),
                                           test::data_path("oracle/llama-tiny").string()),
                         [](const auto& info) {
                           return info.index == 0 ? std::string("pycoder") : std::string("llama");
                         });

// Hybrid models: the tree's state checkpoints (on whole blocks and on tails) go to disk with the
// blocks, and a hit after a reload restarts from one exactly as before.
TEST(HybridPrefixCacheFile, ReloadRestartsFromTheSavedCheckpoints) {
  auto model = Model::load(test::data_path("oracle/qwen35-hybrid-tiny"), {.load_tokenizer = false});
  const int vocab = model->config().vocab;
  auto make_cache = [&] {
    return std::make_shared<KvCache>(model->n_attention_layers(), model->config().n_kv_heads,
                                     model->config().head_dim, KvCacheOptions{.block_size = 16});
  };
  const auto dir = test::temp_dir() / "cache";
  auto system = random_ids(300, vocab, 1);
  auto turn1 = cat(system, random_ids(9, vocab, 2)), turn2 = cat(system, random_ids(23, vocab, 3));
  auto cache = make_cache();
  PrefixCache pc(model, cache, 64 << 20, /*checkpoint_every=*/128);
  { Session a = pc.acquire("t", turn1); }  // checkpoints at 128, 256 (whole blocks) and 309 (tail)
  const PrefixCacheStats st = pc.stats();
  ASSERT_EQ(st.checkpoints, 3u);
  const PrefixCacheFileReport w = pc.spill(dir, 0);
  EXPECT_TRUE(w.warnings.empty()) << joined(w.warnings);
  EXPECT_EQ(w.blocks, st.blocks);
  EXPECT_EQ(w.checkpoints, 3u);

  auto cache2 = make_cache();
  PrefixCache pc2(model, cache2, 64 << 20);
  const PrefixCacheFileReport r = pc2.reload(dir);
  EXPECT_TRUE(r.warnings.empty()) << joined(r.warnings);
  EXPECT_EQ(r.checkpoints, 3u);
  EXPECT_EQ(r.blocks, st.blocks);
  EXPECT_EQ(pc2.stats().checkpoint_bytes, st.checkpoint_bytes);
  int reused = -1;
  Session b = pc2.acquire("t", turn2, &reused);
  EXPECT_EQ(reused, 256);
  Session ref(model, cache2);
  ref.append(turn2);
  EXPECT_TRUE(*b.recurrent_state() == *ref.recurrent_state());
  EXPECT_TRUE(bit_equal(b.logits(), ref.logits()));
  auto more = random_ids(140, vocab, 5);
  b.append(more);
  ref.append(more);
  EXPECT_TRUE(*b.recurrent_state() == *ref.recurrent_state());
  EXPECT_TRUE(bit_equal(b.logits(), ref.logits()));
  // The tail's checkpoint: turn1 whole, then more.
  auto again = cat(turn1, random_ids(20, vocab, 6));
  Session c = pc2.acquire("t", again, &reused);
  EXPECT_EQ(reused, 309);
  Session ref_c(model, cache2);
  ref_c.append(again);
  EXPECT_TRUE(*c.recurrent_state() == *ref_c.recurrent_state());
  EXPECT_TRUE(bit_equal(c.logits(), ref_c.logits()));
}

}  // namespace fak
