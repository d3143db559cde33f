// The one KV memory budget: the cache never maps more than it (slabs included), gives the prefix
// cache's unheld blocks back before failing, and fails with KvBudgetError naming the limit; the
// prefix cache's eviction order (cost- and use-weighted, runtime/prefix_cache.h); the default
// budget's arithmetic and the machine's memory as read from /proc and cgroups.
#include "runtime/kv_budget.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/memory_info.h"
#include "models/config.h"
#include "runtime/prefix_cache.h"
#include "test_util.h"

namespace fak {

using test::bit_equal;
using test::cat;
using test::random_ids;

// Whatever the budget, allocating until the cache refuses never maps more than the budget, and
// the blocks it refuses at are all the budget can hold in whole slabs, less at most one per slab.
TEST(KvBudget, MappedBytesNeverPassTheBudget) {
  constexpr int kLayers = 3, kHeads = 2, kDim = 8, kBs = 4;
  const size_t block = size_t(kLayers) * 3 * kBs * kHeads * kDim * 4;  // f32 + Kraw
  for (size_t budget : {block, 7 * block + 5, 64 * block, 65 * block, 300 * block + block / 2}) {
    for (size_t slab_bytes : {size_t(128) << 20, 5 * block}) {
      SCOPED_TRACE("budget " + std::to_string(budget) + ", slab " + std::to_string(slab_bytes));
      KvCache cache(kLayers, kHeads, kDim,
                    {.block_size = kBs, .max_bytes = budget, .slab_bytes = slab_bytes});
      EXPECT_EQ(cache.block_bytes(), block);
      EXPECT_LE(cache.capacity_blocks() * block, budget);
      const size_t slabs = (cache.capacity_blocks() + size_t(cache.blocks_per_slab()) - 1) /
                           size_t(cache.blocks_per_slab());
      EXPECT_GT(cache.capacity_blocks() + slabs, budget / block);
      std::vector<int32_t> held;
      for (;;) {
        try {
          held.push_back(cache.allocate());
        } catch (const KvBudgetError& e) {
          EXPECT_NE(std::string(e.what()).find("KV memory budget spent"), std::string::npos);
          break;
        }
        ASSERT_LE(cache.mapped_bytes(), budget);
        ASSERT_LE(held.size(), budget / block);
      }
      EXPECT_EQ(held.size(), cache.capacity_blocks());
      EXPECT_EQ(cache.mapped_bytes(), cache.capacity_blocks() * block);
      EXPECT_EQ(cache.capacity_tokens(), cache.capacity_blocks() * kBs);
      // A block given back is the next one handed out: nothing more is mapped.
      cache.release(held.back());
      EXPECT_EQ(cache.allocate(), held.back());
      EXPECT_EQ(cache.mapped_bytes(), cache.capacity_blocks() * block);
    }
  }
}

// map_all maps what allocate would map block by block, at once: every block then comes from the
// mapped slabs, none of them twice, and nothing more is ever mapped. Without a budget it maps
// nothing.
TEST(KvBudget, MapAllMapsTheWholeBudgetUpFront) {
  constexpr int kLayers = 2, kHeads = 2, kDim = 8, kBs = 4;
  const size_t block = size_t(kLayers) * 3 * kBs * kHeads * kDim * 4;
  KvCache cache(kLayers, kHeads, kDim,
                {.block_size = kBs, .max_bytes = 300 * block + 7, .slab_bytes = 64 * block});
  const int32_t first = cache.allocate();
  EXPECT_EQ(cache.map_all(), cache.capacity_blocks() * block);
  EXPECT_EQ(cache.mapped_bytes(), cache.capacity_blocks() * block);
  std::set<int32_t> seen = {first};
  for (size_t i = 1; i < cache.capacity_blocks(); ++i) {
    const int32_t b = cache.allocate();
    EXPECT_TRUE(seen.insert(b).second) << "block " << b << " handed out twice";
    const float row[kHeads * kDim] = {float(b)};
    cache.store_row(b, 1, KvPlane::V, kBs - 1, row);  // every block is backed memory
  }
  EXPECT_EQ(cache.mapped_bytes(), cache.capacity_blocks() * block);
  EXPECT_THROW(cache.allocate(), KvBudgetError);
  KvCache unbounded(kLayers, kHeads, kDim, {.block_size = kBs});
  EXPECT_EQ(unbounded.map_all(), 0u);
  EXPECT_EQ(unbounded.mapped_bytes(), 0u);
}

TEST(KvBudget, ABudgetBelowOneBlockIsRefusedNamingBoth) {
  try {
    KvCache cache(2, 2, 8, {.block_size = 32, .max_bytes = 1000});
    FAIL() << "accepted a budget below one block";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("KV budget of"), std::string::npos) << m;
    EXPECT_NE(m.find("less than one block (32 tokens"), std::string::npos) << m;
  }
}

class BudgetedPrefixCache : public ::testing::Test {
 protected:
  void SetUp() override {
    model = Model::load(test::source_path("models/pycoder-6m"), {.load_tokenizer = false});
    vocab = model->config().vocab;
  }
  std::shared_ptr<KvCache> make_cache(size_t blocks) {
    const size_t block = kv_bytes_per_token(model->n_attention_layers(), model->config().n_kv_heads,
                                            model->config().head_dim, DType::F32, true) *
                         16;
    auto c = std::make_shared<KvCache>(
        model->n_attention_layers(), model->config().n_kv_heads, model->config().head_dim,
        KvCacheOptions{
            .block_size = 16, .max_bytes = blocks * block, .slab_bytes = blocks * block});
    EXPECT_EQ(c->capacity_blocks(), blocks);
    return c;
  }
  // A session on a cache of its own, for cold references.
  Session unbudgeted() {
    return Session(model, std::make_shared<KvCache>(
                              model->n_attention_layers(), model->config().n_kv_heads,
                              model->config().head_dim, KvCacheOptions{.block_size = 16}));
  }
  // A request as the server runs it: the cached part, the rest prefilled, offered back after.
  int run(PrefixCache& pc, const std::vector<int32_t>& prompt) {
    int reused = -1;
    Session s = pc.acquire("t", prompt, &reused);
    pc.insert("t", s);
    return reused;
  }
  std::shared_ptr<const Model> model;
  int vocab = 0;
};

// Nothing is evicted while the budget holds everything; when a sequence needs a block the budget
// no longer has, the prefix cache gives back one it alone holds; when it holds none, the cache
// refuses with KvBudgetError.
TEST_F(BudgetedPrefixCache, GivesBlocksBackOnlyWhenASequenceNeedsThem) {
  auto cache = make_cache(16);
  PrefixCache pc(model, cache, 0);
  auto a = random_ids(16 * 8, vocab, 1), b = random_ids(16 * 6, vocab, 2);
  EXPECT_EQ(run(pc, a), 0);
  EXPECT_EQ(run(pc, b), 0);
  EXPECT_EQ(pc.stats().blocks, 14u);
  EXPECT_EQ(pc.stats().blocks_evicted, 0);
  EXPECT_EQ(run(pc, a), 16 * 8 - 1);  // all of a but the last token
  Session s(model, cache);
  s.append(random_ids(16 * 4, vocab, 3));  // 2 free blocks, then 2 taken back
  EXPECT_EQ(pc.stats().blocks_reclaimed, 2);
  EXPECT_EQ(cache->blocks_in_use(), 16u);
  EXPECT_LE(cache->mapped_bytes(), cache->max_bytes());
  // b (used once, shallow) went, not a (used twice): a is still whole.
  int reused = -1;
  Session again = pc.acquire("t", a, &reused);
  EXPECT_EQ(reused, 16 * 8 - 1);
  Session cold(model, cache);
  EXPECT_THROW(cold.append(random_ids(16 * 8, vocab, 4)), KvBudgetError);
  try {
    Session more(model, cache);
    more.append(random_ids(16 * 16, vocab, 5));
    FAIL() << "allocated past the budget";
  } catch (const KvBudgetError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("all 256 tokens (16 blocks of 16)"), std::string::npos) << m;
  }
}

// The reported case at small scale: an agent's long prefix, resent for a second turn, then short
// side requests with other prompts. When the budget cannot hold them all, the side requests' blocks
// go first, oldest side request first, and the agent's whole prefix stays; pure LRU would have cut
// the agent's tail (it is the least recently used).
TEST_F(BudgetedPrefixCache, SideRequestsGoBeforeAnAgentsLongPrefix) {
  auto cache = make_cache(48);
  PrefixCache pc(model, cache, 0);
  const auto system = random_ids(16 * 30, vocab, 10);
  const auto turn1 = cat(system, random_ids(20, vocab, 11));
  EXPECT_EQ(run(pc, turn1), 0);
  const auto turn2 = cat(turn1, random_ids(30, vocab, 12));
  EXPECT_EQ(run(pc, turn2), int(turn1.size()));
  // 34 blocks for the agent (33 whole, a tail of 2); two side requests of 6 blocks each fill the
  // budget to 46 of 48.
  const auto side1 = random_ids(16 * 6, vocab, 13), side2 = random_ids(16 * 6, vocab, 14);
  EXPECT_EQ(run(pc, side1), 0);
  EXPECT_EQ(run(pc, side2), 0);
  EXPECT_EQ(pc.stats().blocks_evicted, 0);
  // A third needs 6 with 2 free: 4 come back, from the first side request.
  const auto side3 = random_ids(16 * 6, vocab, 15);
  EXPECT_EQ(run(pc, side3), 0);
  EXPECT_EQ(pc.stats().blocks_reclaimed, 4);
  int reused = -1;
  Session agent = pc.acquire("t", cat(turn2, random_ids(7, vocab, 16)), &reused);
  EXPECT_EQ(reused, int(turn2.size())) << "the agent's prefix lost blocks";
  Session cold = unbudgeted();
  cold.append(cat(turn2, random_ids(7, vocab, 16)));
  EXPECT_TRUE(bit_equal(agent.logits(), cold.logits()));
  Session s2 = pc.acquire("t", side2, &reused);
  EXPECT_EQ(reused, 16 * 6 - 1) << "the second side request was younger than the first";
}

// Of two prompts used once and equally old, the shallow one goes before the deep one's tail: a
// block at depth d costs 1 + d x block / P0 token-units to recompute (runtime/prefix_cache.h).
TEST_F(BudgetedPrefixCache, ADeepTailCostsMoreThanAShallowPrompt) {
  auto cache = make_cache(40);
  PrefixCache pc(model, cache, 0);
  const auto deep = random_ids(16 * 30, vocab, 20), shallow = random_ids(16 * 6, vocab, 21);
  // The deep prompt first: under LRU its tail would be what goes.
  EXPECT_EQ(run(pc, deep), 0);
  EXPECT_EQ(run(pc, shallow), 0);
  Session s(model, cache);
  s.append(random_ids(16 * 6, vocab, 22));  // 4 free: 2 come back
  EXPECT_EQ(pc.stats().blocks_reclaimed, 2);
  int reused = -1;
  Session d = pc.acquire("t", cat(deep, {1}), &reused);
  EXPECT_EQ(reused, 16 * 30);
}

// The cache's own cap (hybrid checkpoints, tests) still evicts at insert time, lowest priority
// first, and never what a session holds.
TEST_F(BudgetedPrefixCache, OwnCapEvictsAtInsert) {
  auto cache = make_cache(64);
  PrefixCache pc(model, cache, 10 * cache->block_bytes());
  const auto p1 = random_ids(16 * 8, vocab, 30), p2 = random_ids(16 * 8, vocab, 31);
  run(pc, p1);
  {
    int reused = -1;
    Session held = pc.acquire("t", p2, &reused);
    pc.insert("t", held);
    EXPECT_EQ(pc.stats().blocks, 10u);  // 6 of p1 went; p2's 8 are held
  }
  EXPECT_EQ(pc.stats().blocks_evicted, 6);
  EXPECT_EQ(pc.stats().blocks_reclaimed, 0);
}

// The startup line spells out every KV type's bytes: pycoder-6m has 6 layers x 2 heads x 32 dims.
TEST(KvBudget, StartupLineNamesEachTypesBytes) {
  auto model = Model::load(test::source_path("models/pycoder-6m"), {.load_tokenizer = false});
  EXPECT_EQ(
      describe_bytes_per_token(*model, DType::F16, false, false),
      "1536 bytes/token (6 attention layers x (K + V) x 2 KV heads x 32 dims x 2 bytes, f16)");
  EXPECT_EQ(describe_bytes_per_token(*model, DType::Q8_0, false, false),
            "816 bytes/token (6 attention layers x (K + V) x 2 KV heads x 32 dims x 34/32 bytes, "
            "q8_0)");
  EXPECT_EQ(describe_bytes_per_token(*model, DType::Q4_0, false, false),
            "432 bytes/token (6 attention layers x (K + V) x 2 KV heads x 32 dims x 18/32 bytes, "
            "q4_0)");
}

TEST(KvBudget, BytesPerTokenOfQwen25ShapesAsTheReadmeTable) {
  struct Row {
    const char* config;
    size_t f32_kraw, f32, half_kraw, half, q8, q4;
  };
  // The table in docs/server.md ("KV memory: one budget, sized for agents").
  const Row rows[] = {
      {"qwen2.5-0.5b-instruct.json", 36864, 24576, 18432, 12288, 6528, 3456},
      {"qwen2.5-1.5b-instruct.json", 86016, 57344, 43008, 28672, 15232, 8064},
      {"qwen2.5-7b-instruct.json", 172032, 114688, 86016, 57344, 30464, 16128},
      {"qwen3-30b-a3b.json", 294912, 196608, 147456, 98304, 52224, 27648},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.config);
    const ModelConfig c = load_hf_config(test::data_path(std::string("configs/") + r.config));
    auto bpt = [&](DType t, bool kraw) {
      return kv_bytes_per_token(c.n_layers, c.n_kv_heads, c.head_dim, t, kraw);
    };
    EXPECT_EQ(bpt(DType::F32, true), r.f32_kraw);
    EXPECT_EQ(bpt(DType::F32, false), r.f32);
    EXPECT_EQ(bpt(DType::F16, true), r.half_kraw);
    EXPECT_EQ(bpt(DType::BF16, true), r.half_kraw);
    EXPECT_EQ(bpt(DType::BF16, false), r.half);
    EXPECT_EQ(bpt(DType::Q8_0, false), r.q8);  // 34 bytes per 32 elements
    EXPECT_EQ(bpt(DType::Q4_0, false), r.q4);  // 18 bytes per 32 elements
  }
}

TEST(KvBudget, DefaultIsContextsPlusRoomBoundedByTheMachine) {
  auto model = Model::load(test::source_path("models/pycoder-6m"), {.load_tokenizer = false});
  const size_t bpt = 4608;  // 6 layers x 3 planes x 2 heads x 32 x 4 bytes
  KvBudgetOptions o;
  o.ctx = 4096;
  o.parallel = 4;
  KvBudget b = plan_kv_budget(*model, o);
  EXPECT_EQ(b.bytes_per_token, bpt);
  EXPECT_EQ(b.bytes, 4 * 4096 * bpt + (size_t(256) << 20));  // 4 contexts + 256 MiB of room
  EXPECT_FALSE(b.bounded_by_machine);
  o.ctx = 65536;  // one context (288 MiB) is more than 256 MiB: that is the room
  EXPECT_EQ(plan_kv_budget(*model, o).bytes, 5 * 65536 * bpt);
  o.ctx = 4096;
  o.cache_bytes = size_t(100) << 20;
  EXPECT_EQ(plan_kv_budget(*model, o).bytes, 4 * 4096 * bpt + (size_t(100) << 20));
  // 1 GiB available, 200 MiB of it mapped weights: 824 MiB less max(256 MiB, 1/8) is 568 MiB.
  o.available = size_t(1) << 30;
  o.weights_bytes = size_t(200) << 20;
  o.parallel = 256;
  b = plan_kv_budget(*model, o);
  EXPECT_TRUE(b.bounded_by_machine);
  EXPECT_EQ(b.bytes, size_t(568) << 20);
  // Plenty of memory: the machine does not matter.
  o.available = size_t(64) << 30;
  o.parallel = 4;
  o.cache_bytes = 0;
  EXPECT_EQ(plan_kv_budget(*model, o).bytes, 4 * 4096 * bpt + (size_t(256) << 20));
  // An explicit budget is the budget, even above what the machine can spare (flagged).
  o.total_bytes = size_t(100) << 30;
  b = plan_kv_budget(*model, o);
  EXPECT_EQ(b.bytes, size_t(100) << 30);
  EXPECT_TRUE(b.explicit_total);
  EXPECT_TRUE(b.over_machine);
  o.dtype = DType::BF16;
  o.keep_kraw = false;
  o.total_bytes = 0;
  EXPECT_EQ(plan_kv_budget(*model, o).bytes_per_token, 1536u);
}

// --draft mtp: each sequence's head keeps a one-layer KV beside the cache; the budget holds it too
// (added to the default, set aside from an explicit one), and a budget that cannot is refused.
TEST(KvBudget, TheMtpHeadsKvIsInTheBudget) {
  auto model = Model::load(test::source_path("models/pycoder-6m"), {.load_tokenizer = false});
  KvBudgetOptions o;
  o.ctx = 4096;
  o.parallel = 4;
  const size_t plain = plan_kv_budget(*model, o).bytes;
  o.draft_head_bytes = size_t(3) << 20;
  KvBudget b = plan_kv_budget(*model, o);
  EXPECT_EQ(b.draft_heads, size_t(12) << 20);
  EXPECT_EQ(b.bytes, plain + (size_t(12) << 20));
  EXPECT_EQ(b.cache_bytes(), plain);
  o.total_bytes = size_t(100) << 20;
  b = plan_kv_budget(*model, o);
  EXPECT_EQ(b.bytes, size_t(100) << 20);
  EXPECT_EQ(b.cache_bytes(), size_t(88) << 20);
  o.total_bytes = size_t(12) << 20;
  try {
    plan_kv_budget(*model, o);
    ADD_FAILURE() << "a budget that only holds the heads was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MTP draft heads' KV of 12 MiB"), std::string::npos)
        << e.what();
  }
}

TEST(MemoryInfo, ReadsMemAvailableAndTheTightestCgroupLimit) {
  const auto root = test::temp_dir();
  auto put = [&](const std::string& rel, const std::string& text) {
    std::filesystem::create_directories((root / rel).parent_path());
    test::write_file(root / rel, text);
  };
  put("proc/meminfo", "MemTotal: 16000000 kB\nMemFree: 1000 kB\nMemAvailable: 8000000 kB\n");
  put("proc/self/cgroup", "0::/\n");
  MemoryInfo m = read_memory_info(root);
  EXPECT_EQ(m.mem_available, size_t(8000000) * 1024);
  EXPECT_EQ(m.cgroup_limit, 0u);
  EXPECT_EQ(m.available(), m.mem_available);
  // cgroup v2: a 4 GiB limit on a parent, 1 GiB used of which 256 MiB is inactive file cache;
  // the process's own cgroup says "max".
  put("proc/self/cgroup", "0::/app/worker\n");
  put("sys/fs/cgroup/app/memory.max", "4294967296\n");
  put("sys/fs/cgroup/app/memory.current", "1073741824\n");
  put("sys/fs/cgroup/app/memory.stat", "anon 1\ninactive_file 268435456\nactive_file 5\n");
  put("sys/fs/cgroup/app/worker/memory.max", "max\n");
  put("sys/fs/cgroup/app/worker/memory.current", "1000\n");
  m = read_memory_info(root);
  EXPECT_EQ(m.cgroup_limit, size_t(4) << 30);
  EXPECT_EQ(m.cgroup_usage, size_t(768) << 20);
  EXPECT_EQ(m.available(), (size_t(4) << 30) - (size_t(768) << 20));
  // cgroup v1, in a namespace where the listed path does not exist: the mount's root counts.
  put("proc/self/cgroup", "4:memory:/docker/abc\n1:cpu:/\n");
  put("sys/fs/cgroup/memory/memory.limit_in_bytes", "2147483648\n");
  put("sys/fs/cgroup/memory/memory.usage_in_bytes", "536870912\n");
  m = read_memory_info(root);
  EXPECT_EQ(m.cgroup_limit, size_t(2) << 30);
  EXPECT_EQ(m.available(), size_t(1536) << 20);
  EXPECT_NE(m.describe().find("cgroup limit 2.0 GiB"), std::string::npos) << m.describe();
  // v1's "no limit" is a huge number, not a limit.
  put("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_EQ(read_memory_info(root).cgroup_limit, 0u);
  // This machine: something is available.
  EXPECT_GT(read_memory_info().available(), 0u);
}

}  // namespace fak
