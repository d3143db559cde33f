// The reuse stack's exactness guarantees, bit for bit: clone == copy, truncate == never appended,
// save/load == uninterrupted, exact evict == never saw the span, batched == alone.
#include "runtime/session.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/dtype.h"
#include "core/error.h"
#include "core/hash.h"
#include "runtime/model_cache.h"
#include "runtime/sampler.h"
#include "test_util.h"

namespace fak {

using test::bit_equal;
using test::random_ids;

namespace {

struct ModelCase {
  std::string name;
  std::string dir;
  Device device = {};
  DType kv = DType::F32;  // the cache's storage type
};

// gtest prints a parameter's bytes unless told how: the case's name reads better in test lists.
void PrintTo(const ModelCase& c, std::ostream* os) {
  *os << c.name;
}

// Every model on the CPU; in a CUDA build every one again on the GPU, where the same
// guarantees must hold bit for bit on the device's own bits (skipped, saying why, without a GPU).
std::vector<ModelCase> models() {
  std::vector<ModelCase> cases{{"pycoder_6m", test::source_path("models/pycoder-6m")},
                               {"llama_tiny", test::data_path("oracle/llama-tiny")},
                               {"qwen2_tiny", test::data_path("oracle/qwen2-tiny")},
                               {"qwen3_tiny", test::data_path("oracle/qwen3-tiny")},
                               {"qwen35_hybrid_tiny", test::data_path("oracle/qwen35-hybrid-tiny")},
                               {"qwen3_moe_tiny", test::data_path("oracle/qwen3-moe-tiny")},
                               {"qwen35_moe_tiny", test::data_path("oracle/qwen35-moe-tiny")}};
  const size_t n = cases.size();
  if (cuda_compiled())
    for (size_t i = 0; i < n; ++i)
      cases.push_back({cases[i].name + "_cuda", cases[i].dir, Device{DeviceKind::Cuda, 0}});
  // Sliding windows (8 positions on 5 of its 6 layers, shorter than every test's context), two
  // RoPE tables: CPU only (the CUDA backend refuses the family).
  cases.push_back({"gemma3_tiny", test::data_path("oracle/gemma3-tiny")});
  // GLM-4.5 MoE: a sigmoid, grouped router; CPU only too.
  cases.push_back({"glm4moe_tiny", test::data_path("oracle/glm4moe-tiny")});
  // gpt-oss: attention sinks on every head, windows of 8 on every other layer, a biased router,
  // experts with biases; CPU only too.
  cases.push_back({"gpt_oss_tiny", test::data_path("oracle/gpt-oss-tiny")});
  // The oracle fixtures `models` and pycoder-6m again with another KV storage type.
  auto with_kv = [&cases](std::initializer_list<const char*> models, DType kv, const char* tag) {
    for (const char* m : models) {
      std::string name = std::string(m) + "_" + tag;
      for (char& ch : name)
        if (ch == '-') ch = '_';
      cases.push_back({name, test::data_path(std::string("oracle/") + m), {}, kv});
    }
    cases.push_back(
        {std::string("pycoder_6m_") + tag, test::source_path("models/pycoder-6m"), {}, kv});
  };
  // F16 KV, the default of `fak run` and `fak serve`: on CPUs with AMX-BF16 its attention runs on
  // the tile unit (ops/attention_kernels.h), whose own arithmetic must keep every guarantee too: a
  // dense model, a windowed one, one with sinks and windows, the hybrid.
  with_kv({"qwen3-tiny", "gemma3-tiny", "gpt-oss-tiny", "qwen35-hybrid-tiny"}, DType::F16, "f16kv");
  // Q8_0 KV (blocks of 32 with a scale): quantised the same way wherever a row is written, so
  // every guarantee holds on its bits too; a dense model, the hybrid, a windowed model and a MoE.
  with_kv({"qwen3-tiny", "qwen35-hybrid-tiny", "gemma3-tiny", "gpt-oss-tiny"}, DType::Q8_0, "q8kv");
  // Q4_0 KV (blocks of 32: an f16 scale, 4-bit codes), the long-context option: the same.
  with_kv({"qwen35-hybrid-tiny", "gemma3-tiny", "gpt-oss-tiny"}, DType::Q4_0, "q4kv");
  return cases;
}

std::vector<int32_t> concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Whether both sessions still hold layer 0's rows at position p (a windowed layer drops rows
// behind its window, memory/kv_cache.h).
bool has_layer0_rows(const KvCache& cache, const Session& a, const Session& b, int p) {
  const int bs = cache.block_size();
  return !cache.windowed(0) || (cache.has_window_rows(a.blocks()[size_t(p / bs)]) &&
                                cache.has_window_rows(b.blocks()[size_t(p / bs)]));
}

// Greedy continuation of n tokens from a session (modifies it).
std::vector<int32_t> greedy(Session& s, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    int32_t t = argmax(s.logits());
    out.push_back(t);
    s.append({&t, 1});
  }
  return out;
}

}  // namespace

class Reuse : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    if (const std::string why = device_unavailable_reason(GetParam().device); !why.empty())
      GTEST_SKIP() << why;
    model = Model::load(GetParam().dir, {.load_tokenizer = false, .device = GetParam().device});
    // Slabs of one block, so that every test here reads rows across slabs.
    cache = std::make_shared<KvCache>(model->n_attention_layers(), model->config().n_kv_heads,
                                      model->config().head_dim,
                                      KvCacheOptions{.block_size = 16,
                                                     .dtype = GetParam().kv,
                                                     .slab_bytes = 1,
                                                     .storage = model->make_kv_storage(),
                                                     // Windowed layers drop rows behind the
                                                     // window, as a served model's do.
                                                     .layer_window = kv_layer_windows(*model)});
    vocab = model->config().vocab;
  }
  Session cold(const std::vector<int32_t>& ids) {
    Session s(model, cache);
    s.append(ids);
    return s;
  }
  // The cold run a session built by appending `parts` one after another must equal bit for bit:
  // one append of everything, on every model (no forward depends on how tokens are grouped into
  // calls; hybrids run the DeltaNet's recurrent form for every token).
  Session cold_parts(std::initializer_list<std::vector<int32_t>> parts) {
    return cold(concat(parts));
  }
  bool hybrid() const { return model->config().is_hybrid(); }
  std::shared_ptr<const Model> model;
  std::shared_ptr<KvCache> cache;
  int vocab = 0;
};

TEST_P(Reuse, ChunkedPrefillAndDecodeEqualColdPrefill) {
  auto ids = random_ids(53, vocab, 1);
  Session whole = cold(ids);
  Session pieces(model, cache);
  pieces.append({ids.data(), 20});
  pieces.append({ids.data() + 20, 1});
  pieces.append({ids.data() + 21, 32});
  Session one_by_one(model, cache);
  for (int32_t t : ids) one_by_one.append({&t, 1});
  EXPECT_TRUE(bit_equal(whole.logits(), pieces.logits()));
  EXPECT_TRUE(bit_equal(whole.logits(), one_by_one.logits()));
}

// How many blocks a slab holds changes where rows live, not a bit of what is computed from them.
TEST_P(Reuse, SlabSizeChangesNoBits) {
  ASSERT_EQ(cache->blocks_per_slab(), 1);
  auto wide = std::make_shared<KvCache>(
      model->n_attention_layers(), model->config().n_kv_heads, model->config().head_dim,
      KvCacheOptions{
          .block_size = 16, .dtype = GetParam().kv, .storage = model->make_kv_storage()});
  EXPECT_EQ(wide->blocks_per_slab(), 64);
  const auto ids = random_ids(70, vocab, 4);
  Session a(model, cache), b(model, wide);
  a.append(ids);
  b.append(ids);
  EXPECT_TRUE(bit_equal(a.logits(), b.logits()));
  Session a2 = a.clone(), b2 = b.clone();
  std::vector<Session*> as{&a, &a2}, bs{&b, &b2};
  for (int step = 0; step < 4; ++step) {
    const std::vector<int32_t> next{int32_t(step + 1), int32_t(2 * step + 3)};
    decode_batch(as, next);
    decode_batch(bs, next);
    ASSERT_TRUE(bit_equal(a.logits(), b.logits())) << "step " << step;
    ASSERT_TRUE(bit_equal(a2.logits(), b2.logits())) << "step " << step;
  }
}

TEST_P(Reuse, CloneSharesBlocksAndDivergesCopyOnWrite) {
  auto prefix = random_ids(37, vocab, 2);  // ends mid-block: the shared tail block must be copied
  Session base = cold(prefix);
  const size_t blocks_before = cache->blocks_in_use();
  Session a = base.clone();
  EXPECT_EQ(cache->blocks_in_use(), blocks_before) << "clone copied KV";
  Session b = base.clone();
  auto sa = random_ids(9, vocab, 3), sb = random_ids(21, vocab, 4);
  a.append(sa);
  b.append(sb);
  EXPECT_TRUE(bit_equal(a.logits(), cold_parts({prefix, sa}).logits()));
  EXPECT_TRUE(bit_equal(b.logits(), cold_parts({prefix, sb}).logits()));
  // The original is untouched by its clones' writes.
  Session base_again = base.clone();
  EXPECT_EQ(greedy(base_again, 6), greedy(*std::make_unique<Session>(cold(prefix)), 6));
}

TEST_P(Reuse, TruncateEqualsNeverAppended) {
  auto ids = random_ids(40, vocab, 5);
  Session s = cold(ids);
  s.truncate(23);
  EXPECT_EQ(s.size(), 23);
  EXPECT_TRUE(bit_equal(s.logits(), cold({ids.begin(), ids.begin() + 23}).logits()));
  auto more = random_ids(7, vocab, 6);
  s.append(more);
  EXPECT_TRUE(bit_equal(s.logits(), cold_parts({{ids.begin(), ids.begin() + 23}, more}).logits()));
}

TEST_P(Reuse, SaveLoadEqualsUninterrupted) {
  auto ids = random_ids(45, vocab, 7);
  Session s = cold(ids);
  auto path = test::temp_dir() / "s.fak";
  s.save(path);
  Session loaded = Session::load(path, model, cache);
  EXPECT_EQ(loaded.tokens(), s.tokens());
  EXPECT_TRUE(bit_equal(loaded.logits(), s.logits()));
  EXPECT_EQ(greedy(loaded, 12), greedy(s, 12));
}

TEST_P(Reuse, ExactEvictEqualsNeverSawSpan) {
  auto a = random_ids(21, vocab, 8), span = random_ids(13, vocab, 9), c = random_ids(17, vocab, 10);
  Session s = cold(concat({a, span, c}));
  s.evict(int(a.size()), int(a.size() + span.size()), EvictMode::Exact);
  Session fresh = cold(concat({a, c}));
  EXPECT_EQ(s.tokens(), fresh.tokens());
  EXPECT_TRUE(bit_equal(s.logits(), fresh.logits()));
  EXPECT_EQ(greedy(s, 8), greedy(fresh, 8));
}

TEST_P(Reuse, ExactEvictOnASharedPrefixLeavesTheOtherSessionAlone) {
  auto a = random_ids(30, vocab, 11), span = random_ids(5, vocab, 12), c = random_ids(9, vocab, 13);
  Session s = cold(concat({a, span, c}));
  Session other = s.clone();
  s.evict(10, 15, EvictMode::Exact);
  EXPECT_TRUE(bit_equal(other.logits(), cold(concat({a, span, c})).logits()));
  auto full = concat({a, span, c});
  full.erase(full.begin() + 10, full.begin() + 15);
  EXPECT_TRUE(bit_equal(s.logits(), cold(full).logits()));
}

TEST_P(Reuse, ShiftEvictIsExactInLayerZeroAndCloseOverall) {
  auto a = random_ids(20, vocab, 14), span = random_ids(10, vocab, 15),
       c = random_ids(12, vocab, 16);
  Session s = cold(concat({a, span, c}));
  if (hybrid()) {
    // A recurrent state cannot be re-positioned: hybrids refuse shift eviction, untouched.
    EXPECT_THROW(s.evict(20, 30, EvictMode::Shift), Error);
    EXPECT_EQ(s.size(), 42);
    return;
  }
  Session other = s.clone();  // shift must copy-on-write too
  s.evict(20, 30, EvictMode::Shift);
  Session fresh = cold(concat({a, c}));
  ASSERT_EQ(s.tokens(), fresh.tokens());
  // Layer 0's K and V only depend on each token and its position: identical to a fresh run (with
  // f32 rows; q8_0's and q4_0's pre-RoPE keys are themselves rounded, so the re-rotated key is
  // rounded twice: within a few of its block's steps).
  const int bs = cache->block_size();
  std::vector<float> k1(size_t(model->config().kv_dim())), k2(k1.size());
  for (int p = 0; p < s.size(); ++p) {
    if (!has_layer0_rows(*cache, s, fresh, p)) continue;  // out of a windowed layer 0's window
    cache->load_row(s.blocks()[size_t(p / bs)], 0, KvPlane::K, p % bs, k1.data());
    cache->load_row(fresh.blocks()[size_t(p / bs)], 0, KvPlane::K, p % bs, k2.data());
    if (GetParam().kv == DType::F32) {
      ASSERT_TRUE(bit_equal(k1, k2)) << "layer 0 K at " << p;
    } else {
      float scale = 0, worst = 0;
      for (size_t i = 0; i < k1.size(); ++i) {
        scale = std::max(scale, std::fabs(k2[i]));
        worst = std::max(worst, std::fabs(k1[i] - k2[i]));
      }
      const float levels = GetParam().kv == DType::Q4_0 ? 8 : 127;  // steps in a block's absmax
      ASSERT_LE(worst, 4 * scale / levels) << "layer 0 K at " << p;
    }
  }
  EXPECT_TRUE(bit_equal(other.logits(), cold(concat({a, span, c})).logits()));
}

// Without pre-RoPE keys (the CLI's and the server's default), a shift rotates each survivor's
// stored key by the distance it moved (llama.cpp's K-shift): layer 0's keys are then within
// rounding of a fresh run's, in f32 and in f16 storage, and decoding goes on from there.
TEST_P(Reuse, ShiftEvictWithoutKrawRotatesTheStoredKeys) {
  if (hybrid()) return;  // refused on hybrids, as above
  for (DType dt : {DType::F32, DType::F16}) {
    auto lean = std::make_shared<KvCache>(model->n_attention_layers(), model->config().n_kv_heads,
                                          model->config().head_dim,
                                          KvCacheOptions{.block_size = 16,
                                                         .keep_kraw = false,
                                                         .dtype = dt,
                                                         .slab_bytes = 1,
                                                         .storage = model->make_kv_storage()});
    auto a = random_ids(20, vocab, 14), span = random_ids(10, vocab, 15),
         c = random_ids(12, vocab, 16);
    Session s(model, lean), fresh(model, lean);
    s.append(concat({a, span, c}));
    s.evict(20, 30, EvictMode::Shift);
    fresh.append(concat({a, c}));
    ASSERT_EQ(s.tokens(), fresh.tokens());
    const int bs = lean->block_size();
    std::vector<float> k1(size_t(model->config().kv_dim())), k2(k1.size());
    double worst = 0, scale = 0;
    for (int p = 0; p < s.size(); ++p) {
      if (!has_layer0_rows(*lean, s, fresh, p)) continue;
      lean->load_row(s.blocks()[size_t(p / bs)], 0, KvPlane::K, p % bs, k1.data());
      lean->load_row(fresh.blocks()[size_t(p / bs)], 0, KvPlane::K, p % bs, k2.data());
      for (size_t i = 0; i < k1.size(); ++i) {
        worst = std::max(worst, double(std::fabs(k1[i] - k2[i])));
        scale = std::max(scale, double(std::fabs(k2[i])));
      }
    }
    // One rotation's rounding (f32), or a second rounding to f16 (11 bits: 2^-11 of the scale).
    EXPECT_LE(worst, scale * (dt == DType::F32 ? 1e-5 : 2e-3)) << dtype_name(dt);
    s.append(random_ids(3, vocab, 17));  // and it decodes on
    EXPECT_EQ(s.size(), 35);
  }
}

TEST_P(Reuse, BatchedDecodeEqualsAlone) {
  auto prefix = random_ids(25, vocab, 17);
  Session base = cold(prefix);
  std::vector<Session> agents;
  std::vector<Session> alone;
  for (int i = 0; i < 4; ++i) {
    auto suffix = random_ids(3 + 5 * i, vocab, 20 + uint32_t(i));
    agents.push_back(base.clone());
    agents.back().append(suffix);
    alone.push_back(cold_parts({prefix, suffix}));
  }
  for (int step = 0; step < 6; ++step) {
    std::vector<Session*> ptrs;
    std::vector<int32_t> next;
    for (auto& s : agents) {
      ptrs.push_back(&s);
      next.push_back(argmax(s.logits()));
    }
    decode_batch(ptrs, next);
    for (size_t i = 0; i < alone.size(); ++i) {
      alone[i].append({&next[i], 1});
      ASSERT_TRUE(bit_equal(agents[i].logits(), alone[i].logits()))
          << "agent " << i << " step " << step;
    }
  }
}

// Ragged prefills of several sessions in one forward call == each appended alone, then the
// sessions keep decoding identically.
TEST_P(Reuse, BatchedAppendEqualsAlone) {
  auto prefix = random_ids(21, vocab, 31);
  Session base = cold(prefix);
  std::vector<Session> agents;
  std::vector<std::vector<int32_t>> suffixes;
  for (int i = 0; i < 4; ++i) {
    agents.push_back(base.clone());
    suffixes.push_back(random_ids(1 + 7 * i, vocab, 40 + uint32_t(i)));
  }
  std::vector<Session*> ptrs;
  std::vector<std::span<const int32_t>> spans;
  for (int i = 0; i < 4; ++i) {
    ptrs.push_back(&agents[size_t(i)]);
    spans.emplace_back(suffixes[size_t(i)]);
  }
  append_batch(ptrs, spans);
  for (size_t i = 0; i < agents.size(); ++i) {
    Session alone = cold_parts({prefix, suffixes[i]});
    ASSERT_EQ(agents[i].tokens(), alone.tokens());
    ASSERT_TRUE(bit_equal(agents[i].logits(), alone.logits())) << "agent " << i;
    EXPECT_EQ(greedy(agents[i], 4), greedy(alone, 4)) << "agent " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Reuse, ::testing::ValuesIn(models()),
                         [](const auto& info) { return info.param.name; });

class SessionFile : public ::testing::Test {
 protected:
  void SetUp() override {
    model = Model::load(test::data_path("oracle/qwen2-tiny"), {.load_tokenizer = false});
    cache = std::make_shared<KvCache>(model->n_attention_layers(), model->config().n_kv_heads,
                                      model->config().head_dim);
    Session s(model, cache);
    s.append(random_ids(30, model->config().vocab, 1));
    path = test::temp_dir() / "s.fak";
    s.save(path);
    bytes = test::read_file(path);
  }
  std::string load_error(const std::string& content) {
    auto p = test::temp_dir() / "bad.fak";
    test::write_file(p, content);
    try {
      Session::load(p, model, cache);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  std::shared_ptr<const Model> model;
  std::shared_ptr<KvCache> cache;
  std::filesystem::path path;
  std::string bytes;
};

TEST_F(SessionFile, RefusesTruncatedFiles) {
  for (size_t n : {size_t(0), size_t(5), size_t(20), bytes.size() / 2, bytes.size() - 1})
    EXPECT_NE(load_error(bytes.substr(0, n)), "") << "truncated to " << n;
}

TEST_F(SessionFile, RefusesCorruptedBytes) {
  std::string bad = bytes;
  bad[bad.size() / 2] ^= 0x40;
  EXPECT_NE(load_error(bad).find("checksum"), std::string::npos);
}

TEST_F(SessionFile, RefusesWrongMagicAndVersion) {
  std::string bad = bytes;
  bad[0] = 'X';
  EXPECT_NE(load_error(bad).find("not a fak session"), std::string::npos);
  bad = bytes;
  bad[8] = 99;
  EXPECT_NE(load_error(bad).find("version"), std::string::npos);
}

// A header rewritten with its checksum made to match (a crafted file, not a damaged one): wrong
// JSON types, missing fields and out-of-range counts get the loader's own refusal, and the cache
// keeps no block of the failed load.
TEST_F(SessionFile, RefusesCraftedHeaders) {
  uint32_t header_len;
  std::memcpy(&header_len, bytes.data() + 12, 4);
  const std::string header = bytes.substr(16, header_len);
  const std::string payload = bytes.substr(16 + header_len, bytes.size() - 16 - header_len - 8);
  auto with_header = [&](const std::string& h) {
    std::string out = bytes.substr(0, 12);
    const uint32_t len = uint32_t(h.size());
    out.append(reinterpret_cast<const char*>(&len), 4);
    out += h;
    out += payload;
    Fnv1a sum;
    sum.update(out);
    const uint64_t d = sum.digest();
    out.append(reinterpret_cast<const char*>(&d), 8);
    return out;
  };
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string h = header;
    const size_t at = h.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return h.replace(at, from.size(), to);
  };
  EXPECT_EQ(load_error(with_header(header)), "");  // the rewrite itself keeps the file valid
  const size_t before = cache->blocks_in_use();
  const std::pair<std::string, std::string> cases[] = {
      {"\"n_tokens\":30", "\"n_tokens\":\"30\""},
      {"\"n_tokens\":30", "\"n_tokens\":30.5"},
      {"\"kraw\":true", "\"kraw\":1"},
      {"\"kv_dtype\":\"f32\"", "\"kv_dtype\":[]"},
      {"\"recurrent_bytes\":", "\"recurrent_bytez\":"},
  };
  for (const auto& [from, to] : cases) {
    const std::string err = load_error(with_header(replace(from, to)));
    EXPECT_NE(err.find("corrupted header"), std::string::npos) << to << ": " << err;
  }
  for (const std::string h : {"[1,2,3]", "42", "null", "{"})
    EXPECT_NE(load_error(with_header(h)).find("corrupted header"), std::string::npos) << h;
  for (const std::string n : {"-3", "18446744073709551615", "4097"})
    EXPECT_NE(
        load_error(with_header(replace("\"n_tokens\":30", "\"n_tokens\":" + n))).find("KV layout"),
        std::string::npos)
        << n;
  EXPECT_EQ(cache->blocks_in_use(), before);
}

TEST_F(SessionFile, RefusesAnotherModel) {
  auto other = Model::load(test::data_path("oracle/qwen3-tiny"), {.load_tokenizer = false});
  auto other_cache = std::make_shared<KvCache>(
      other->n_attention_layers(), other->config().n_kv_heads, other->config().head_dim);
  try {
    Session::load(path, other, other_cache);
    FAIL() << "loaded a session of another model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("different model"), std::string::npos) << e.what();
  }
}

TEST_F(SessionFile, SaveIsAtomicAndLeavesNoTempFile) {
  auto files_in = [](const std::filesystem::path& dir) {
    int n = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) n += entry.is_regular_file();
    return n;
  };
  EXPECT_EQ(files_in(path.parent_path()), 1);  // the session, no temp file beside it
  // Saving into a directory that does not exist fails cleanly.
  Session s(model, cache);
  s.append(random_ids(3, model->config().vocab, 2));
  EXPECT_THROW(s.save("/nonexistent-dir/x.fak"), Error);
}

// A save that fails half way (a file size limit, as a full disk fails it) throws naming the file,
// removes its temp file and leaves the previous session whole: it still loads, as it was.
TEST_F(SessionFile, FullDiskKeepsThePreviousSession) {
  Session longer = Session::load(path, model, cache);
  longer.append(random_ids(60, model->config().vocab, 3));
  const std::string msg =
      test::error_with_file_size_limit(bytes.size() / 2, [&] { longer.save(path); });
  EXPECT_NE(msg.find("cannot write"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path.filename().string()), std::string::npos) << msg;
  EXPECT_EQ(test::read_file(path), bytes);
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(path.parent_path()))
    files += entry.is_regular_file();
  EXPECT_EQ(files, 1);
  EXPECT_EQ(Session::load(path, model, cache).size(), 30);
}

TEST(KvCache, RefcountsAndBudget) {
  KvCache cache(2, 2, 4, {.block_size = 4, .keep_kraw = false, .max_bytes = 4 * 2 * 2 * 4 * 8 * 4});
  EXPECT_EQ(cache.block_bytes(), size_t(2 * 2 * 4 * 8 * 4));
  int32_t a = cache.allocate();
  cache.retain(a);
  EXPECT_EQ(cache.refcount(a), 2);
  cache.release(a);
  EXPECT_EQ(cache.blocks_in_use(), 1u);
  std::vector<float> row(8, 0.0f);
  row[3] = 7.0f;
  cache.store_row(a, 1, KvPlane::K, 2, row.data());
  int32_t b = cache.copy_block(a, 4);
  std::vector<float> back(8);
  cache.load_row(b, 1, KvPlane::K, 2, back.data());
  EXPECT_EQ(back, row);
  cache.allocate();
  cache.allocate();
  EXPECT_THROW(cache.allocate(), Error);  // budget of 4 blocks
  cache.release(a);
  EXPECT_NO_THROW(cache.allocate());
  EXPECT_EQ(cache.row(a, 0, KvPlane::Kraw, 0), nullptr);
}

// Every row of every head, plane, layer and block has storage of its own: distinct values stored
// everywhere (blocks over several slabs) all come back. And one head's rows of consecutive blocks
// of a slab follow each other, so decode attention streams long runs of memory.
TEST(KvCache, EveryRowHasItsOwnStorage) {
  constexpr int kLayers = 3, kHeads = 2, kDim = 4, kBs = 4, kBlocks = 150;
  for (size_t slab_bytes : {size_t(128) << 20, size_t(1), size_t(5000)}) {
    SCOPED_TRACE(slab_bytes);
    KvCache cache(
        kLayers, kHeads, kDim,
        {.block_size = kBs, .keep_kraw = true, .dtype = DType::F32, .slab_bytes = slab_bytes});
    // A block here is 3 x 3 x 4 rows of 32 bytes: 64 of them fit the default, 1 and 4 the others.
    EXPECT_EQ(cache.blocks_per_slab(), slab_bytes == 1 ? 1 : slab_bytes == 5000 ? 4 : 64);
    std::vector<int32_t> blocks;
    for (int i = 0; i < kBlocks; ++i) blocks.push_back(cache.allocate());
    const KvPlane planes[] = {KvPlane::K, KvPlane::V, KvPlane::Kraw};
    auto value = [&](int b, int l, int p, int j, int e) {
      return float((((b * kLayers + l) * 3 + p) * kBs + j) * kHeads * kDim + e);
    };
    std::vector<float> row(kHeads * kDim);
    for (int b = 0; b < kBlocks; ++b)
      for (int l = 0; l < kLayers; ++l)
        for (int p = 0; p < 3; ++p)
          for (int j = 0; j < kBs; ++j) {
            for (int e = 0; e < kHeads * kDim; ++e) row[size_t(e)] = value(b, l, p, j, e);
            cache.store_row(blocks[size_t(b)], l, planes[p], j, row.data());
          }
    int wrong = 0;
    for (int b = 0; b < kBlocks; ++b)
      for (int l = 0; l < kLayers; ++l)
        for (int p = 0; p < 3; ++p)
          for (int j = 0; j < kBs; ++j) {
            cache.load_row(blocks[size_t(b)], l, planes[p], j, row.data());
            for (int e = 0; e < kHeads * kDim; ++e) wrong += row[size_t(e)] != value(b, l, p, j, e);
          }
    EXPECT_EQ(wrong, 0);
    int runs = 0;
    for (int b = 1; b < kBlocks; ++b)
      if (blocks[size_t(b)] == blocks[size_t(b - 1)] + 1 &&
          cache.row(blocks[size_t(b)], 1, KvPlane::V, 0) ==
              cache.row(blocks[size_t(b - 1)], 1, KvPlane::V, 0) + size_t(kBs) * cache.head_bytes())
        ++runs;
    EXPECT_GE(runs, cache.blocks_per_slab() > 1 ? kBlocks / 2 : 0);
  }
}

// One KV head's rows of a block are contiguous; whole rows go in and out through store_row /
// load_row / read_rows / write_rows / move_row / copy_block, which must agree on where each head
// of each row lives.
TEST(KvCache, HeadContiguousLayoutRoundTrips) {
  constexpr int kHeads = 3, kDim = 8, kBs = 4, kKv = kHeads * kDim;
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    KvCache cache(2, kHeads, kDim, {.block_size = kBs, .keep_kraw = true, .dtype = dt});
    const int32_t a = cache.allocate();
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<std::vector<float>> rows(kBs, std::vector<float>(kKv));
    for (int j = 0; j < kBs; ++j) {
      for (float& v : rows[size_t(j)]) v = nd(rng);
      cache.store_row(a, 1, KvPlane::V, j, rows[size_t(j)].data());
    }
    EXPECT_GE(cache.head_stride(), size_t(kBs) * cache.head_bytes());
    std::vector<float> back(kKv), once(kKv);
    for (int j = 0; j < kBs; ++j) {
      cache.load_row(a, 1, KvPlane::V, j, back.data());
      // Storing what came back changes nothing (the rounding happened once).
      cache.store_row(a, 0, KvPlane::K, j, back.data());
      cache.load_row(a, 0, KvPlane::K, j, once.data());
      EXPECT_EQ(once, back) << dtype_name(dt);
      if (dt == DType::F32) {
        EXPECT_EQ(back, rows[size_t(j)]);
      }
      for (int h = 0; h < kHeads; ++h) {
        // Head h of row j: head_stride() past head 0, and rows of one head follow each other.
        const uint8_t* p = cache.row(a, 1, KvPlane::V, 0) + size_t(h) * cache.head_stride() +
                           size_t(j) * cache.head_bytes();
        EXPECT_EQ(p, cache.row(a, 1, KvPlane::V, j) + size_t(h) * cache.head_stride());
        std::vector<float> head(kDim);
        for (int d = 0; d < kDim; ++d) {
          if (dt == DType::F32) {
            std::memcpy(&head[size_t(d)], p + 4 * d, 4);
          } else {
            uint16_t v;
            std::memcpy(&v, p + 2 * d, 2);
            head[size_t(d)] = dt == DType::F16 ? f16_to_f32(v) : bf16_to_f32(v);
          }
          EXPECT_EQ(head[size_t(d)], back[size_t(h * kDim + d)]) << dtype_name(dt);
        }
      }
    }
    // Token-major rows out, into another block, and back.
    std::vector<uint8_t> bytes(size_t(3) * cache.row_bytes());
    cache.read_rows(a, 1, KvPlane::V, 3, bytes.data());
    const int32_t b = cache.allocate();
    cache.write_rows(b, 0, KvPlane::Kraw, 3, bytes.data());
    for (int j = 0; j < 3; ++j) {
      cache.load_row(a, 1, KvPlane::V, j, back.data());
      std::vector<float> tm(kKv);
      cache.load_row(b, 0, KvPlane::Kraw, j, tm.data());
      EXPECT_EQ(tm, back) << dtype_name(dt) << " row " << j;
    }
    // move_row (within one block and across blocks) and copy_block move every head.
    cache.move_row(a, 0, a, 3, 1, KvPlane::V);
    cache.load_row(a, 1, KvPlane::V, 0, back.data());
    cache.load_row(a, 1, KvPlane::V, 3, once.data());
    EXPECT_EQ(back, once);
    cache.move_row(b, 3, a, 2, 1, KvPlane::V);
    cache.load_row(b, 1, KvPlane::V, 3, back.data());
    cache.load_row(a, 1, KvPlane::V, 2, once.data());
    EXPECT_EQ(back, once);
    const int32_t c = cache.copy_block(a, 3);
    for (int j = 0; j < 3; ++j) {
      cache.load_row(a, 1, KvPlane::V, j, back.data());
      cache.load_row(c, 1, KvPlane::V, j, once.data());
      EXPECT_EQ(back, once);
    }
  }
}

TEST(KvCache, RefusesAnInvalidShape) {
  EXPECT_THROW(KvCache(1, 0, 8), Error);
  EXPECT_THROW(KvCache(1, 2, 0), Error);
  // Q8_0 rows are blocks of 32: a head of 16 cannot be one, and the error says so.
  try {
    KvCache(1, 2, 16, {.dtype = DType::Q8_0});
    ADD_FAILURE() << "a q8_0 cache with heads of 16 was made";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 32"), std::string::npos) << e.what();
  }
  try {
    KvCache(1, 2, 16, {.dtype = DType::Q4_0});
    ADD_FAILURE() << "a q4_0 cache with heads of 16 was made";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q4_0 needs a head size that is a multiple of 32"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(parse_kv_type("q4_0"), DType::Q4_0);
  EXPECT_THROW(parse_kv_type("q4_1"), Error);
  // A cache with the model's kv_dim but another split into heads is not the model's cache.
  auto model = Model::load(test::source_path("models/pycoder-6m"), {.load_tokenizer = false});
  const ModelConfig& c = model->config();
  ASSERT_EQ(c.head_dim % 2, 0);
  auto other =
      std::make_shared<KvCache>(model->n_attention_layers(), c.n_kv_heads * 2, c.head_dim / 2);
  try {
    Session s(model, other);
    FAIL() << "a cache of another head shape was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV cache shape does not match"), std::string::npos)
        << e.what();
  }
}

}  // namespace fak

namespace fak {

// Half-precision KV storage: the guarantees are about determinism, so they hold for every storage
// type; the logits move by the rounding of K and V only.
class HalfKv : public ::testing::TestWithParam<DType> {};

TEST_P(HalfKv, ExactnessHoldsAndLogitsStayClose) {
  auto model = Model::load(test::source_path("models/pycoder-6m"), {.load_tokenizer = false});
  auto cache = std::make_shared<KvCache>(model->n_attention_layers(), model->config().n_kv_heads,
                                         model->config().head_dim,
                                         KvCacheOptions{.block_size = 16, .dtype = GetParam()});
  auto f32 = std::make_shared<KvCache>(model->n_attention_layers(), model->config().n_kv_heads,
                                       model->config().head_dim);
  const int vocab = model->config().vocab;
  auto a = random_ids(20, vocab, 1), b = random_ids(9, vocab, 2), c = random_ids(14, vocab, 3);
  Session s(model, cache);
  s.append(concat({a, b, c}));
  s.evict(20, 29, EvictMode::Exact);
  Session fresh(model, cache);
  fresh.append(concat({a, c}));
  EXPECT_TRUE(bit_equal(s.logits(), fresh.logits()));
  auto path = test::temp_dir() / "half.fak";
  s.save(path);
  Session loaded = Session::load(path, model, cache);
  EXPECT_TRUE(bit_equal(loaded.logits(), s.logits()));
  EXPECT_THROW(Session::load(path, model, f32), Error);  // f32 cache cannot take half rows
  Session full(model, f32);
  full.append(concat({a, c}));
  double md = 0;
  for (size_t i = 0; i < s.logits().size(); ++i)
    md = std::max(md, double(std::fabs(s.logits()[i] - full.logits()[i])));
  EXPECT_GT(md, 0.0);
  const double bound = GetParam() == DType::F16    ? 0.02
                       : GetParam() == DType::BF16 ? 0.1
                       : GetParam() == DType::Q8_0 ? 0.3
                                                   : 3.0;
  EXPECT_LT(md, bound) << "KV rounding moved the logits too far";
  EXPECT_EQ(argmax(s.logits()), argmax(full.logits()));
  // Bytes per token: half of f32's, or for q8_0 34 per 32 elements (17/64 of f32's), for q4_0 18
  // (9/64).
  const size_t per_token = cache->block_bytes() / 16, f32_per_token = f32->block_bytes() / 32;
  if (GetParam() == DType::Q8_0)
    EXPECT_EQ(per_token * 64, f32_per_token * 17);
  else if (GetParam() == DType::Q4_0)
    EXPECT_EQ(per_token * 64, f32_per_token * 9);
  else
    EXPECT_EQ(per_token * 2, f32_per_token);
}

INSTANTIATE_TEST_SUITE_P(Types, HalfKv,
                         ::testing::Values(DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0),
                         [](const auto& info) { return std::string(kv_type_name(info.param)); });

}  // namespace fak
