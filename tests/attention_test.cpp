// Attention kernels against the portable reference, and the property the reuse stack relies on:
// a query's output does not depend on which other queries are computed with it (prefill vs decode,
// batch vs alone).
#include "ops/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "memory/kv_cache.h"
#include "ops/attention_kernels.h"
#include "ops/matmul_kernels.h"

namespace fak {
namespace {

struct AttnSetup {
  int n_heads, n_kv_heads, head_dim, n_ctx;
  DType dtype;
};

class AttentionFixture {
 public:
  explicit AttentionFixture(const AttnSetup& s)
      : s_(s), cache_(1, s.n_kv_heads, s.head_dim, {16, false, 0, s.dtype}) {
    std::mt19937 rng(uint32_t(s.n_heads * 131 + s.head_dim * 7 + s.n_ctx));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int kv_dim = s.n_kv_heads * s.head_dim;
    std::vector<float> row(static_cast<size_t>(kv_dim));
    for (int j = 0; j < s.n_ctx; ++j) {
      if (j % cache_.block_size() == 0) blocks_.push_back(cache_.allocate());
      for (auto& x : row) x = nd(rng);
      cache_.store_row(blocks_.back(), 0, KvPlane::K, j % cache_.block_size(), row.data());
      for (auto& x : row) x = nd(rng);
      cache_.store_row(blocks_.back(), 0, KvPlane::V, j % cache_.block_size(), row.data());
    }
    q_.resize(size_t(s.n_ctx) * size_t(q_dim()));
    // Scaled queries give peaked softmaxes, where errors would show.
    for (auto& x : q_) x = 2.0f * nd(rng);
  }
  int q_dim() const { return s_.n_heads * s_.head_dim; }
  AttentionShape shape() const {
    AttentionShape sh{s_.n_heads, s_.n_kv_heads, s_.head_dim, 1.0f / std::sqrt(float(s_.head_dim)),
                      window_};
    sh.sinks = sinks_.empty() ? nullptr : sinks_.data();
    return sh;
  }
  void set_window(int window) { window_ = window; }
  void set_sinks(std::vector<float> sinks) { sinks_ = std::move(sinks); }
  // Query `pos`'s output for head h in double, from the cache's f32 rows: the softmax over its
  // window's scores and the head's sink (if any), as transformers' gpt-oss eager attention.
  std::vector<double> expected(int pos, int h) const {
    const int hd = s_.head_dim, bs = cache_.block_size(), kvh = h / (s_.n_heads / s_.n_kv_heads);
    const float* q = q_.data() + size_t(pos) * size_t(q_dim()) + size_t(h) * size_t(hd);
    const int first = window_ > 0 ? std::max(0, pos - window_ + 1) : 0;
    auto row = [&](KvPlane p, int j) {
      return reinterpret_cast<const float*>(cache_.row(blocks_[size_t(j / bs)], 0, p, j % bs)) +
             size_t(kvh) * (cache_.head_stride() / sizeof(float));
    };
    std::vector<double> score;
    double mx = sinks_.empty() ? -INFINITY : double(sinks_[size_t(h)]);
    for (int j = first; j <= pos; ++j) {
      double d = 0;
      for (int i = 0; i < hd; ++i) d += double(q[i]) * double(row(KvPlane::K, j)[i]);
      score.push_back(d / std::sqrt(double(hd)));
      mx = std::max(mx, score.back());
    }
    double sum = sinks_.empty() ? 0.0 : std::exp(double(sinks_[size_t(h)]) - mx);
    for (double& x : score) sum += (x = std::exp(x - mx));
    std::vector<double> out(size_t(hd), 0.0);
    for (int j = first; j <= pos; ++j)
      for (int i = 0; i < hd; ++i)
        out[size_t(i)] += score[size_t(j - first)] / sum * double(row(KvPlane::V, j)[i]);
    return out;
  }
  // Outputs of queries at positions [start, start + n) computed as one task.
  std::vector<float> run(int start, int n, bool reference) const {
    std::vector<float> out(size_t(n) * size_t(q_dim()), 0.0f);
    std::vector<AttentionTask> tasks{
        {q_.data() + size_t(start) * size_t(q_dim()), out.data(), &blocks_, n, start}};
    if (reference)
      attention_reference(tasks, cache_, 0, shape());
    else
      attention(tasks, cache_, 0, shape());
    return out;
  }
  const std::vector<int32_t>& blocks() const { return blocks_; }
  const std::vector<float>& q() const { return q_; }
  const KvCache& cache() const { return cache_; }

 private:
  AttnSetup s_;
  int window_ = 0;
  std::vector<float> sinks_;
  KvCache cache_;
  std::vector<int32_t> blocks_;
  std::vector<float> q_;
};

// The AVX2 / AVX-512 tiles agree bit for bit; tests comparing them turn the AMX tiles off (they
// take f16 / bf16 rows where the CPU has AMX-BF16, with their own rounding).
struct AmxOff {
  AmxOff() { kernels::set_amx_enabled(false); }
  ~AmxOff() { kernels::set_amx_enabled(true); }
};

// How far from the portable path's f32 products: the AMX tiles drop the lo * lo term of each
// product (2^-16 of it, ops/attention_kernels.h), the others round in f32 alone. On these peaked
// softmaxes (scores up to ~20) that is up to ~1e-4 on an output, a fifth of what storing each key
// in f16 (2^-12 relative) already moves a score.
double reference_tolerance(const AttnSetup& s) {
  return kernels::amx_attention_enabled() && kernels::amx_attention_supported(s.head_dim, s.dtype)
             ? 2e-4
             : 2e-5;
}

std::vector<AttnSetup> setups() {
  return {
      {14, 2, 64, 300, DType::F32}, {4, 4, 32, 77, DType::F32},    {8, 1, 128, 130, DType::F32},
      {6, 2, 16, 40, DType::F32},   {24, 4, 256, 70, DType::F32},  {14, 2, 64, 150, DType::BF16},
      {4, 2, 32, 99, DType::F16},   {3, 1, 48, 33, DType::F32},    {14, 2, 64, 150, DType::Q8_0},
      {8, 1, 128, 300, DType::F16}, {14, 2, 64, 333, DType::F16},  {16, 2, 256, 140, DType::BF16},
      {4, 2, 32, 99, DType::Q8_0},  {14, 2, 64, 150, DType::Q4_0}, {8, 1, 128, 70, DType::Q4_0}};
}

TEST(Attention, MatchesReferenceOverAllPositions) {
  for (const AttnSetup& s : setups()) {
    AttentionFixture f(s);
    const auto fast = f.run(0, s.n_ctx, false);
    const auto ref = f.run(0, s.n_ctx, true);
    double max_diff = 0;
    for (size_t i = 0; i < fast.size(); ++i)
      max_diff = std::max(max_diff, double(std::fabs(fast[i] - ref[i])));
    EXPECT_LT(max_diff, reference_tolerance(s))
        << "heads " << s.n_heads << "/" << s.n_kv_heads << " head_dim " << s.head_dim << " ctx "
        << s.n_ctx << " dtype " << dtype_name(s.dtype);
  }
}

// Prefill of everything, then per-token decode, then ragged chunks: every query's output must be
// the same bits whichever way it was batched. (On AMX-BF16 the whole prefill's units take the
// scores as queries x keys and a decode step's as keys x queries: the tile products either way
// round must agree bit for bit.)
TEST(Attention, OutputOfAQueryDoesNotDependOnItsBatch) {
  for (const AttnSetup& s : setups()) {
    AttentionFixture f(s);
    const size_t qd = size_t(f.q_dim());
    const auto all = f.run(0, s.n_ctx, false);
    for (int pos : {0, 1, s.n_ctx / 2, s.n_ctx - 1}) {
      const auto one = f.run(pos, 1, false);
      EXPECT_EQ(0, std::memcmp(one.data(), all.data() + size_t(pos) * qd, qd * sizeof(float)))
          << "decode at " << pos << " head_dim " << s.head_dim;
    }
    for (int start = 0, len = 1; start < s.n_ctx; start += len, len = len % 5 + 2) {
      const int n = std::min(len, s.n_ctx - start);
      const auto chunk = f.run(start, n, false);
      EXPECT_EQ(0, std::memcmp(chunk.data(), all.data() + size_t(start) * qd,
                               chunk.size() * sizeof(float)))
          << "chunk at " << start << " head_dim " << s.head_dim;
    }
  }
}

// A prefill deep enough that its K and V rows are not widened into f32 copies for the call (past
// attention.cpp's 8 MiB: 8300 rows of 2 x 64 f32 values, K and V, are 8.1 MiB), so the tiles
// widen the rows they read (on AVX-512 four full tiles to a unit, each key block once for all
// four): each query still the same bits as its decode step, and close to the reference.
TEST(Attention, DeepPrefillPastTheWideningCapEqualsDecode) {
  for (DType dt : {DType::F16, DType::Q8_0}) {
    const AttnSetup s{14, 2, 64, 8300, dt};
    AttentionFixture f(s);
    const size_t qd = size_t(f.q_dim());
    const int start = s.n_ctx - 64;
    const auto chunk = f.run(start, 64, false);
    const auto ref = f.run(start, 64, true);
    double max_diff = 0;
    for (size_t i = 0; i < chunk.size(); ++i)
      max_diff = std::max(max_diff, double(std::fabs(chunk[i] - ref[i])));
    EXPECT_LT(max_diff, reference_tolerance(s)) << dtype_name(dt);
    for (int pos : {start, start + 31, s.n_ctx - 1}) {
      const auto one = f.run(pos, 1, false);
      EXPECT_EQ(
          0, std::memcmp(one.data(), chunk.data() + size_t(pos - start) * qd, qd * sizeof(float)))
          << "decode at " << pos << " " << dtype_name(dt);
    }
  }
}

// Sliding windows (Gemma 3's local layers): close to the reference, which loops over exactly the
// window's keys; every query the same bits however it is batched (a windowed tile holds several
// tokens' queries, each masking the keys before its own window, as a tile of that token alone
// starts its rows there); a window as long as the context is no window; and a short one really
// leaves keys out.
TEST(Attention, SlidingWindowMatchesReferenceAndDoesNotDependOnItsBatch) {
  for (const AttnSetup& s : setups()) {
    for (int window : {1, 7, 16, 33}) {
      AttentionFixture f(s);
      const size_t qd = size_t(f.q_dim());
      const auto full = f.run(0, s.n_ctx, false);
      f.set_window(window);
      const auto all = f.run(0, s.n_ctx, false);
      const auto ref = f.run(0, s.n_ctx, true);
      double max_diff = 0;
      for (size_t i = 0; i < all.size(); ++i)
        max_diff = std::max(max_diff, double(std::fabs(all[i] - ref[i])));
      EXPECT_LT(max_diff, reference_tolerance(s))
          << "window " << window << " head_dim " << s.head_dim;
      for (int pos : {0, window - 1, window, s.n_ctx / 2, s.n_ctx - 1}) {
        if (pos < 0 || pos >= s.n_ctx) continue;
        const auto one = f.run(pos, 1, false);
        EXPECT_EQ(0, std::memcmp(one.data(), all.data() + size_t(pos) * qd, qd * sizeof(float)))
            << "decode at " << pos << " window " << window << " head_dim " << s.head_dim;
      }
      for (int start = 0, len = 1; start < s.n_ctx; start += len, len = len % 7 + 3) {
        const int n = std::min(len, s.n_ctx - start);
        const auto chunk = f.run(start, n, false);
        EXPECT_EQ(0, std::memcmp(chunk.data(), all.data() + size_t(start) * qd,
                                 chunk.size() * sizeof(float)))
            << "chunk at " << start << " window " << window << " head_dim " << s.head_dim;
      }
      // Positions whose window reaches key 0 attend as a full query would; the last one does not.
      EXPECT_EQ(0, std::memcmp(all.data(), full.data(), size_t(window) * qd * sizeof(float)));
      if (s.n_ctx > window) {
        EXPECT_NE(0, std::memcmp(all.data() + size_t(s.n_ctx - 1) * qd,
                                 full.data() + size_t(s.n_ctx - 1) * qd, qd * sizeof(float)));
      }
      f.set_window(s.n_ctx);
      const auto wide = f.run(0, s.n_ctx, false);
      EXPECT_EQ(0, std::memcmp(wide.data(), full.data(), full.size() * sizeof(float)));
    }
  }
}

// Attention sinks (gpt-oss): a learned logit per head that joins its softmax without a value. Every
// path against a float64 computation of transformers' formula, the same bits however a query is
// batched (windowed or not), and sinks of -inf are no sinks, bit for bit.
TEST(Attention, SinksMatchTheFormulaAndDoNotDependOnTheBatch) {
  for (const AttnSetup& s : setups()) {
    for (int window : {0, 7}) {
      AttentionFixture f(s);
      f.set_window(window);
      const size_t qd = size_t(f.q_dim());
      const auto plain = f.run(0, s.n_ctx, false);
      f.set_sinks(std::vector<float>(size_t(s.n_heads), -INFINITY));
      const auto none = f.run(0, s.n_ctx, false);
      EXPECT_EQ(0, std::memcmp(none.data(), plain.data(), plain.size() * sizeof(float)))
          << "-inf sinks, head_dim " << s.head_dim;
      std::vector<float> sinks(size_t(s.n_heads));
      for (int h = 0; h < s.n_heads; ++h) sinks[size_t(h)] = float(h % 4) * 1.5f - 1.0f;
      f.set_sinks(sinks);
      const auto all = f.run(0, s.n_ctx, false);
      const auto ref = f.run(0, s.n_ctx, true);
      double max_diff = 0, max_ref = 0, moved = 0;
      for (size_t i = 0; i < all.size(); ++i) {
        max_diff = std::max(max_diff, double(std::fabs(all[i] - ref[i])));
        moved = std::max(moved, double(std::fabs(all[i] - plain[i])));
      }
      EXPECT_GT(moved, 1e-2) << "the sinks changed nothing";
      if (s.dtype == DType::F32)
        for (int pos : {0, s.n_ctx / 3, s.n_ctx - 1})
          for (int h = 0; h < s.n_heads; ++h) {
            const auto want = f.expected(pos, h);
            for (int i = 0; i < s.head_dim; ++i)
              max_ref = std::max(
                  max_ref,
                  std::fabs(
                      double(all[size_t(pos) * qd + size_t(h) * size_t(s.head_dim) + size_t(i)]) -
                      want[size_t(i)]));
          }
      EXPECT_LT(max_diff, reference_tolerance(s))
          << "window " << window << " head_dim " << s.head_dim;
      EXPECT_LT(max_ref, 2e-5) << "window " << window << " head_dim " << s.head_dim;
      for (int pos : {0, 1, s.n_ctx / 2, s.n_ctx - 1}) {
        const auto one = f.run(pos, 1, false);
        EXPECT_EQ(0, std::memcmp(one.data(), all.data() + size_t(pos) * qd, qd * sizeof(float)))
            << "decode at " << pos << " window " << window << " head_dim " << s.head_dim;
      }
      for (int start = 0, len = 1; start < s.n_ctx; start += len, len = len % 5 + 2) {
        const int n = std::min(len, s.n_ctx - start);
        const auto chunk = f.run(start, n, false);
        EXPECT_EQ(0, std::memcmp(chunk.data(), all.data() + size_t(start) * qd,
                                 chunk.size() * sizeof(float)))
            << "chunk at " << start << " window " << window << " head_dim " << s.head_dim;
      }
    }
  }
}

// Several sequences in one call (batched decode) give each sequence's solo result.
TEST(Attention, BatchedTasksEqualSoloTasks) {
  AttentionFixture f({14, 2, 64, 200, DType::F32});
  const size_t qd = size_t(f.q_dim());
  std::vector<float> out(3 * qd);
  const int pos[3] = {5, 120, 199};
  std::vector<AttentionTask> tasks;
  for (int i = 0; i < 3; ++i)
    tasks.push_back(
        {f.q().data() + size_t(pos[i]) * qd, out.data() + size_t(i) * qd, &f.blocks(), 1, pos[i]});
  attention(tasks, f.cache(), 0, f.shape());
  for (int i = 0; i < 3; ++i) {
    const auto solo = f.run(pos[i], 1, false);
    EXPECT_EQ(0, std::memcmp(solo.data(), out.data() + size_t(i) * qd, qd * sizeof(float))) << i;
  }
}

// The AVX-512 tile (16 query lanes in one register) repeats the AVX2 tile's arithmetic lane for
// lane: every output is the same bits, for prefill tiles (9..16 queries) and decode ones.
TEST(Attention, Avx512TileBitIdenticalToAvx2) {
  if (!kernels::cpu_has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
  const AmxOff amx_off;
  for (const AttnSetup& setup : setups()) {
    for (bool sinks : {false, true}) {
      AttentionFixture f(setup);
      if (sinks) {
        std::vector<float> v(size_t(setup.n_heads));
        for (int h = 0; h < setup.n_heads; ++h) v[size_t(h)] = 0.75f * float(h % 3);
        f.set_sinks(v);
      }
      for (auto [start, n] :
           {std::pair<int, int>{0, setup.n_ctx}, {setup.n_ctx - 1, 1}, {setup.n_ctx / 3, 5}}) {
        kernels::set_avx512_enabled(false);
        const auto narrow = f.run(start, n, false);
        kernels::set_avx512_enabled(true);
        const auto wide = f.run(start, n, false);
        ASSERT_EQ(0, std::memcmp(narrow.data(), wide.data(), 4 * wide.size()))
            << setup.n_heads << "/" << setup.n_kv_heads << " heads of " << setup.head_dim
            << ", queries " << start << "+" << n << (sinks ? ", sinks" : "");
      }
    }
  }
}

// Batched decode on AVX-512 runs the one-token tasks whose first blocks are the same rows (a
// prefix they were cloned from) as one group per KV head (attend_decode_avx512): the shared keys
// are read once for all, each sequence's own keys in its own lanes. Each output must still be the
// bits of the task run alone on the AVX2 kernel, for sequences of different lengths, shared and
// unshared rows, every KV type, GQA groups of 1 to 16 heads (more than 8 are split).
TEST(Attention, GroupedDecodeTasksBitIdenticalToSolo) {
  if (!kernels::cpu_has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
  const AmxOff amx_off;
  std::vector<AttnSetup> all = setups();
  all.push_back({16, 1, 64, 90, DType::F32});  // 16 heads per KV head: two groups of 8
  all.push_back({10, 2, 32, 64, DType::F16});  // 5 heads per KV head, the context one block
  for (const AttnSetup& setup : all) {
    AttentionFixture f(setup);
    const size_t qd = size_t(f.q_dim());
    // b: a's blocks in another order (rows differ past the first block); c, d: the first half /
    // first block of a's blocks, then b's (a shared prefix, then rows of their own).
    std::vector<int32_t> a = f.blocks(), b(a.rbegin(), a.rend()), c = a, d = a;
    for (size_t i = c.size() / 2; i < c.size(); ++i) c[i] = b[i];
    for (size_t i = 1; i < d.size(); ++i) d[i] = b[i];
    const int n = setup.n_ctx;
    struct Case {
      const std::vector<int32_t>* blocks;
      int pos;
    };
    const Case cases[] = {{&a, n - 1}, {&c, n - 2}, {&b, n / 2}, {&a, 3},     {&c, n - 1},
                          {&a, 0},     {&b, n - 1}, {&d, n - 1}, {&c, n / 2}, {&a, n - 2},
                          {&d, n / 3}, {&c, n - 3}, {&a, n - 1}, {&c, 1}};
    std::vector<AttentionTask> tasks;
    std::vector<float> out(std::size(cases) * qd, -1.0f);
    for (size_t i = 0; i < std::size(cases); ++i)
      tasks.push_back({f.q().data() + size_t(cases[i].pos) * qd, out.data() + i * qd,
                       cases[i].blocks, 1, cases[i].pos});
    kernels::set_avx512_enabled(true);
    attention(tasks, f.cache(), 0, f.shape());
    kernels::set_avx512_enabled(false);
    for (size_t i = 0; i < std::size(cases); ++i) {
      std::vector<float> solo(qd, -2.0f);
      std::vector<AttentionTask> one{{tasks[i].q, solo.data(), cases[i].blocks, 1, cases[i].pos}};
      attention(one, f.cache(), 0, f.shape());
      ASSERT_EQ(0, std::memcmp(solo.data(), out.data() + i * qd, qd * sizeof(float)))
          << setup.n_heads << "/" << setup.n_kv_heads << " heads of " << setup.head_dim << " "
          << dtype_name(setup.dtype) << ", task " << i;
    }
    kernels::set_avx512_enabled(true);
  }
}

// On AMX-BF16 a batched decode step of sequences cloned from one prefix runs as one unit per KV
// head (a q-tile per sequence, the shared blocks read once, each sequence's own blocks alone):
// every output the bits of the sequence run alone, with shared prefixes ending inside a block of
// 128 keys, at its edge, or not at all, and sequences shorter than the shared count.
TEST(Attention, AmxGroupedDecodeBitIdenticalToSolo) {
  if (!kernels::amx_attention_enabled()) GTEST_SKIP() << "this CPU has no AMX-BF16";
  std::vector<AttnSetup> all;
  for (const AttnSetup& s : setups())
    if (kernels::amx_attention_supported(s.head_dim, s.dtype)) all.push_back(s);
  all.push_back({14, 2, 64, 700, DType::F16});
  all.push_back({16, 1, 64, 300, DType::BF16});  // 16 heads per KV head: a full q-tile each
  for (const AttnSetup& setup : all) {
    AttentionFixture f(setup);
    const size_t qd = size_t(f.q_dim());
    std::vector<int32_t> a = f.blocks(), b(a.rbegin(), a.rend()), c = a, d = a, e = a;
    for (size_t i = c.size() / 2; i < c.size(); ++i) c[i] = b[i];
    for (size_t i = 1; i < d.size(); ++i) d[i] = b[i];
    for (size_t i = 8; i < e.size(); ++i) e[i] = b[i];  // 128 keys shared: a block's edge
    const int n = setup.n_ctx;
    struct Case {
      const std::vector<int32_t>* blocks;
      int pos;
    };
    // The first case is shorter than the ones it is grouped with: the blocks they share reach
    // past its last key.
    const Case cases[] = {{&a, 2 * n / 3}, {&a, n - 1}, {&c, n - 2}, {&e, n - 1}, {&a, 3},
                          {&c, n - 1},     {&e, n / 2}, {&b, n - 1}, {&d, n - 1}, {&c, n / 2},
                          {&a, n - 2},     {&d, n / 3}, {&e, 130},   {&a, n - 1}, {&c, 1}};
    std::vector<AttentionTask> tasks;
    std::vector<float> out(std::size(cases) * qd, -1.0f);
    for (size_t i = 0; i < std::size(cases); ++i) {
      const int pos = std::min(cases[i].pos, n - 1);
      tasks.push_back(
          {f.q().data() + size_t(pos) * qd, out.data() + i * qd, cases[i].blocks, 1, pos});
    }
    attention(tasks, f.cache(), 0, f.shape());
    for (size_t i = 0; i < std::size(cases); ++i) {
      std::vector<float> solo(qd, -2.0f);
      std::vector<AttentionTask> one{
          {tasks[i].q, solo.data(), cases[i].blocks, 1, tasks[i].start_pos}};
      attention(one, f.cache(), 0, f.shape());
      ASSERT_EQ(0, std::memcmp(solo.data(), out.data() + i * qd, qd * sizeof(float)))
          << setup.n_heads << "/" << setup.n_kv_heads << " heads of " << setup.head_dim << " "
          << dtype_name(setup.dtype) << ", task " << i;
    }
  }
}

// The decode group kernel directly, against the AVX2 tile: groups of 1..6 sequences with every
// split of shared and own keys, including none shared and a shared count past a sequence's end;
// every other trial gives all sequences one length (agents decoding in lockstep), where the own
// keys of two sequences are scored as a pair all the way, and the others lengths that differ,
// where a pair stops at the shorter one and the rest is scored alone.
TEST(Attention, DecodeGroupKernelBitIdenticalToAvx2Tile) {
  if (!kernels::cpu_has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
  const AmxOff amx_off;
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    AttentionFixture f({21, 3, 64, 200, dt});
    const size_t qd = size_t(f.q_dim());
    std::vector<int32_t> a = f.blocks(), b(a.rbegin(), a.rend());
    std::vector<std::vector<int32_t>> tables;
    for (int split = 0; split <= int(a.size()); split += 3) {  // a's first `split` blocks, then b's
      tables.push_back(a);
      for (size_t i = size_t(split); i < a.size(); ++i) tables.back()[i] = b[i];
    }
    std::vector<std::vector<const uint8_t*>> krows(tables.size()), vrows(tables.size());
    for (size_t t = 0; t < tables.size(); ++t)
      for (int j = 0; j < 200; ++j) {
        const int bs = f.cache().block_size();
        krows[t].push_back(f.cache().row(tables[t][size_t(j / bs)], 0, KvPlane::K, j % bs));
        vrows[t].push_back(f.cache().row(tables[t][size_t(j / bs)], 0, KvPlane::V, j % bs));
      }
    const float scale = 0.125f;
    std::mt19937 rng(3);
    for (int trial = 0; trial < 60; ++trial) {
      const int lockstep_pos = trial % 2 ? 100 + int(rng() % 100) : -1;
      kernels::DecodeGroup g;
      g.n = 1 + trial % kernels::kMaxDecodeGroup;
      g.heads = 7;
      const int kvh = trial % 3;
      const int t0 = int(rng() % tables.size());
      g.shared_keys = int(rng() % 220);
      std::vector<std::vector<float>> outs(size_t(g.n), std::vector<float>(7 * 64, -3.0f));
      for (int i = 0; i < g.n; ++i) {
        const int t = i == 0 ? t0 : int(rng() % tables.size());
        const int pos = lockstep_pos >= 0 ? lockstep_pos : 100 + int(rng() % 100);
        // Rows shared with sequence 0 only as far as both tables agree.
        int same = 0;
        while (same < 200 && krows[size_t(t)][size_t(same)] == krows[size_t(t0)][size_t(same)])
          ++same;
        g.shared_keys = std::min(g.shared_keys, same);
        g.seq[i] = {f.q().data() + size_t(pos) * qd + size_t(kvh) * 7 * 64,
                    outs[size_t(i)].data(),
                    pos + 1,
                    {krows[size_t(t)].data(), vrows[size_t(t)].data(),
                     size_t(kvh) * f.cache().head_stride(), dt}};
      }
      ASSERT_TRUE(kernels::attend_decode_avx512(g, 64, scale));
      for (int i = 0; i < g.n; ++i) {
        kernels::AttentionTile tile;
        tile.n = 7;
        std::vector<float> solo(7 * 64, -4.0f);
        for (int h = 0; h < 7; ++h) {
          tile.q[h] = g.seq[i].q + h * 64;
          tile.out[h] = solo.data() + h * 64;
          tile.n_keys[h] = g.seq[i].n_keys;
        }
        kernels::AttentionScratch scratch;
        ASSERT_TRUE(kernels::attend_tile_avx2(tile, g.seq[i].rows, 64, scale, scratch));
        ASSERT_EQ(0, std::memcmp(solo.data(), outs[size_t(i)].data(), solo.size() * 4))
            << dtype_name(dt) << " trial " << trial << " sequence " << i << " of " << g.n
            << ", shared " << g.shared_keys;
      }
    }
  }
}

}  // namespace
}  // namespace fak
