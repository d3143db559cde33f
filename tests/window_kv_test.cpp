// Sliding-window layers keep only their window of KV (memory/kv_cache.h): rows no later token
// reads are dropped behind a session, and every reuse guarantee still holds bit for bit against a
// cache that keeps every row, including edits that reach behind the window, where the session
// recomputes from the latest point whose windowed rows are kept.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/kv_budget.h"
#include "runtime/model_cache.h"
#include "runtime/prefix_cache.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "test_util.h"

namespace fak {

using test::bit_equal;
using test::random_ids;

namespace {

std::vector<int32_t> concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

class WindowKv : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model = Model::load(test::data_path("oracle/" + GetParam()), {.load_tokenizer = false});
    window = 0;
    for (int layer = 0; layer < model->config().n_layers; ++layer)
      window = std::max(window, model->config().window(layer));
    ASSERT_GT(window, 0);
    lean = make_kv_cache(*model, {.block_size = 16});
    full = make_kv_cache(*model, {.block_size = 16, .keep_window_rows = true});
    ASSERT_TRUE(lean->has_windows());
    ASSERT_FALSE(full->has_windows());
    vocab = model->config().vocab;
  }
  // The reference: the same tokens in a cache that keeps every row.
  Session reference(const std::vector<int32_t>& ids) {
    Session s(model, full);
    s.append(ids);
    return s;
  }
  // Appended in uneven calls and single decode steps, so rows are dropped along the way.
  Session built(const std::vector<int32_t>& ids) {
    Session s(model, lean);
    size_t at = 0;
    for (size_t call : {37, 1, 1, 60, 1}) {
      if (at >= ids.size()) break;
      const size_t n = std::min(call, ids.size() - at);
      s.append({ids.data() + at, n});
      at += n;
    }
    for (; at < ids.size(); ++at) s.append({&ids[at], 1});
    return s;
  }
  int dropped_blocks(const Session& s) const {
    int n = 0;
    for (int32_t b : s.blocks()) n += lean->has_window_rows(b) ? 0 : 1;
    return n;
  }
  std::shared_ptr<const Model> model;
  std::shared_ptr<KvCache> lean, full;
  int window = 0, vocab = 0;
};

}  // namespace

TEST_P(WindowKv, RowsBehindTheWindowAreDroppedAndNothingChanges) {
  const auto ids = random_ids(200, vocab, 1);
  Session s = built(ids);
  Session ref = reference(ids);
  EXPECT_TRUE(bit_equal(s.logits(), ref.logits()));
  // What the session holds of its windowed layers: about its window, not its 200 tokens.
  const size_t blocks = s.blocks().size();
  EXPECT_EQ(lean->blocks_in_use(), blocks);
  EXPECT_LE(lean->window_parts_in_use(), size_t(window / 16 + 3));
  EXPECT_GT(dropped_blocks(s), 0);
  EXPECT_LT(lean->bytes_in_use(), full->bytes_in_use());
  // And it decodes on as the reference does.
  for (int i = 0; i < 20; ++i) {
    const int32_t t = argmax(ref.logits());
    ASSERT_EQ(argmax(s.logits()), t) << "step " << i;
    s.append({&t, 1});
    ref.append({&t, 1});
  }
  EXPECT_TRUE(bit_equal(s.logits(), ref.logits()));
}

TEST_P(WindowKv, TruncateBehindTheWindowRecomputesExactly) {
  const auto ids = random_ids(200, vocab, 2);
  Session s = built(ids);
  s.truncate(50);
  EXPECT_EQ(s.size(), 50);
  EXPECT_TRUE(bit_equal(s.logits(), reference({ids.begin(), ids.begin() + 50}).logits()));
  const auto more = random_ids(30, vocab, 3);
  s.append(more);
  EXPECT_TRUE(
      bit_equal(s.logits(), reference(concat({{ids.begin(), ids.begin() + 50}, more})).logits()));
  // truncate with the logits in hand (a speculative verify) reaching behind: the same.
  Session t = built(ids);
  Session ref = reference({ids.begin(), ids.begin() + 60});
  t.truncate(60, ref.logits());
  t.append(more);
  ref.append(more);
  EXPECT_TRUE(bit_equal(t.logits(), ref.logits()));
}

TEST_P(WindowKv, EvictingASpanBehindTheWindowEqualsNeverSeeingIt) {
  const auto a = random_ids(40, vocab, 4), span = random_ids(25, vocab, 5),
             c = random_ids(120, vocab, 6);
  const Session fresh = reference(concat({a, c}));
  for (EvictMode mode : {EvictMode::Exact, EvictMode::Shift}) {
    Session s = built(concat({a, span, c}));
    ASSERT_GT(dropped_blocks(s), 0);
    // Shift needs the rows the span leaves in the window: they are gone, so it is exact instead.
    s.evict(40, 65, mode);
    EXPECT_EQ(s.tokens(), fresh.tokens());
    EXPECT_TRUE(bit_equal(s.logits(), fresh.logits()))
        << (mode == EvictMode::Exact ? "exact" : "shift");
  }
}

TEST_P(WindowKv, CloneKeepsSharedRowsUntilItIsAlone) {
  const auto ids = random_ids(100, vocab, 7);
  Session s = built(ids);
  Session other = s.clone();
  const auto more = random_ids(80, vocab, 8);
  for (int32_t t : more) s.append({&t, 1});
  // The blocks both hold keep their rows (the other session may still need them).
  EXPECT_TRUE(bit_equal(other.logits(), reference(ids).logits()));
  other.append(more);
  EXPECT_TRUE(bit_equal(other.logits(), s.logits()));
}

TEST_P(WindowKv, SaveLoadOfASessionWithDroppedRowsGoesOnExactly) {
  const auto ids = random_ids(150, vocab, 9);
  Session s = built(ids);
  ASSERT_GT(dropped_blocks(s), 0);
  const auto path = test::temp_dir() / "window.fak";
  s.save(path);
  Session loaded = Session::load(path, model, lean);
  EXPECT_EQ(loaded.tokens(), s.tokens());
  EXPECT_EQ(dropped_blocks(loaded), dropped_blocks(s));
  const auto more = random_ids(10, vocab, 10);
  loaded.append(more);
  s.append(more);
  EXPECT_TRUE(bit_equal(loaded.logits(), s.logits()));
  // A rewind behind the window of the loaded session still recomputes exactly.
  loaded.truncate(30);
  EXPECT_TRUE(bit_equal(loaded.logits(), reference({ids.begin(), ids.begin() + 30}).logits()));
  // A cache that keeps every row cannot stand in for the dropped ones: refused, naming why.
  try {
    Session::load(path, model, full);
    FAIL() << "a file with dropped rows loaded into a --swa-full cache";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--swa-full"), std::string::npos) << e.what();
  }
}

TEST_P(WindowKv, PrefixCacheReusesOnlyWhereTheWindowIsKept) {
  PrefixCache pc(model, lean, 64 << 20);
  const auto ids = random_ids(200, vocab, 11);
  Session first = built(ids);
  pc.insert("t", first);
  first = Session(model, lean);
  // The agent's next turn: the whole context again and more. Its end's rows are kept: all reused.
  const auto next = concat({ids, random_ids(9, vocab, 12)});
  int reused = -1;
  Session hit = pc.acquire("t", next, &reused);
  EXPECT_EQ(reused, 200);
  EXPECT_TRUE(bit_equal(hit.logits(), reference(next).logits()));
  // A prompt that leaves the context early, where the windowed rows were dropped: the reuse stops
  // before, where they are all there, and the session is still the cold one.
  const auto branch = concat({{ids.begin(), ids.begin() + 120}, random_ids(7, vocab, 13)});
  Session early = pc.acquire("t", branch, &reused);
  EXPECT_LT(reused, 120);
  EXPECT_TRUE(bit_equal(early.logits(), reference(branch).logits()));
  // Spilled and reloaded (a restarted server): the dropped blocks come back dropped, same answers.
  early = Session(model, lean);
  hit = Session(model, lean);
  const auto dir = test::temp_dir() / "window_prefix";
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(pc.spill(dir, 0).warnings.empty());
  auto lean2 = make_kv_cache(*model, {.block_size = 16});
  PrefixCache pc2(model, lean2, 64 << 20);
  const PrefixCacheFileReport r = pc2.reload(dir);
  ASSERT_TRUE(r.warnings.empty()) << r.warnings[0];
  Session again = pc2.acquire("t", next, &reused);
  EXPECT_EQ(reused, 200);
  EXPECT_TRUE(bit_equal(again.logits(), reference(next).logits()));
  Session branch_again = pc2.acquire("t", branch, &reused);
  EXPECT_LT(reused, 120);
  EXPECT_TRUE(bit_equal(branch_again.logits(), reference(branch).logits()));
  // Into a cache keeping every row the file is refused (a warning), not read as zeros.
  auto full2 = make_kv_cache(*model, {.block_size = 16, .keep_window_rows = true});
  PrefixCache pc3(model, full2, 64 << 20);
  const PrefixCacheFileReport r3 = pc3.reload(dir);
  ASSERT_EQ(r3.warnings.size(), 1u);
  EXPECT_NE(r3.warnings[0].find("--swa-full"), std::string::npos) << r3.warnings[0];
}

TEST_P(WindowKv, TheBudgetCountsWindowPartsAndDroppedOnesMakeRoom) {
  // A budget of 11 whole blocks: a sequence of 14 blocks' tokens fits once its windowed rows are
  // dropped behind it (it holds its blocks' other layers plus about a window of parts). Slabs of
  // one block, so the budget's bytes can go to either kind.
  const size_t block = lean->block_bytes();
  KvCacheOptions o{.block_size = 16, .max_bytes = 11 * block, .slab_bytes = 1};
  auto tight = make_kv_cache(*model, o);
  ASSERT_TRUE(tight->has_windows());
  Session s(model, tight);
  const auto ids = random_ids(14 * 16, vocab, 14);
  for (size_t at = 0; at < ids.size(); at += 32) s.append({ids.data() + at, 32});
  EXPECT_LE(tight->mapped_bytes(), 11 * block);
  EXPECT_TRUE(bit_equal(s.logits(), reference(ids).logits()));
  // Without dropping, the same budget runs out.
  o.keep_window_rows = true;
  auto tight_full = make_kv_cache(*model, o);
  Session f(model, tight_full);
  EXPECT_THROW(f.append(ids), KvBudgetError);
}

// The server's default budget counts a window's worth of windowed rows per sequence, not a
// context's, and a cache of that budget holds the whole context. The fixture with a longer trained
// context (its weights do not depend on it), so that the window is a small part of it.
TEST_P(WindowKv, TheDefaultBudgetHoldsTheContextWithAWindowOfWindowedRows) {
  const std::filesystem::path dir = test::temp_dir() / ("long-" + GetParam());
  std::filesystem::create_directories(dir);
  for (const auto& e : std::filesystem::directory_iterator(test::data_path("oracle/" + GetParam())))
    if (e.path().filename() != "config.json")
      std::filesystem::copy(e.path(), dir / e.path().filename(),
                            std::filesystem::copy_options::overwrite_existing);
  nlohmann::json config =
      nlohmann::json::parse(std::ifstream(test::data_path("oracle/" + GetParam()) / "config.json"));
  config["max_position_embeddings"] = 8192;
  std::ofstream(dir / "config.json") << config.dump();
  auto long_model = Model::load(dir.string(), {.load_tokenizer = false});
  constexpr int kCtx = 8192;
  KvBudgetOptions o{.dtype = DType::F16, .keep_kraw = false, .ctx = kCtx, .cache_bytes = 1};
  const KvBudget b = plan_kv_budget(*long_model, o);
  EXPECT_GT(b.window_bytes_per_token, 0u);
  EXPECT_LT(b.sequences, size_t(kCtx) * b.bytes_per_token);
  auto cache =
      make_kv_cache(*long_model, {.keep_kraw = false, .max_bytes = b.bytes, .dtype = DType::F16});
  EXPECT_GE(cache->capacity_tokens(), size_t(kCtx));
  // A server maps its budget at start; with windowed layers the split follows the sequences, so
  // nothing is mapped ahead (as whole blocks, this context would run out of blocks).
  EXPECT_EQ(cache->map_all(), 0u);
  Session s(long_model, cache);
  const auto ids = random_ids(kCtx, vocab, 15);
  s.append({ids.data(), ids.size() - 1});  // the whole context, its last token decoded
  s.append({&ids.back(), 1});
  EXPECT_EQ(s.size(), kCtx);
  EXPECT_LE(cache->mapped_bytes(), b.bytes);
  // With every row kept, the same context needs the whole-row budget.
  o.keep_window_rows = true;
  EXPECT_EQ(plan_kv_budget(*long_model, o).sequences, size_t(kCtx) * b.bytes_per_token);
}

INSTANTIATE_TEST_SUITE_P(Families, WindowKv, ::testing::Values("gemma3-tiny", "gpt-oss-tiny"),
                         [](const auto& info) { return test::fixture_name(info.param); });

}  // namespace fak
