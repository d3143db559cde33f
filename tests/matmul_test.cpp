// Float-weight matmul (f32, f16, bf16): close to a double-precision reference, and every output
// bit-identical whatever the batch size (decode = prefill, the rule in ops/matmul.h).
#include "ops/matmul.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "ops/matmul_kernels.h"

namespace fak {
namespace {

struct Stored {
  WeightMatrix w;
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // what the stored weights are, as f32
};

Stored make(WType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.5f);
  Stored s;
  const size_t elem = type == WType::F32 ? 4 : 2;
  s.bytes.resize(size_t(rows * cols) * elem);
  s.values.resize(size_t(rows * cols));
  for (size_t i = 0; i < s.values.size(); ++i) {
    const float v = nd(rng);
    if (type == WType::F32) {
      std::memcpy(&s.bytes[4 * i], &v, 4);
      s.values[i] = v;
    } else {
      const uint16_t h = type == WType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
      std::memcpy(&s.bytes[2 * i], &h, 2);
      s.values[i] = type == WType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
  }
  s.w = {type, s.bytes.data(), rows, cols, size_t(cols) * elem};
  return s;
}

std::vector<float> run(const WeightMatrix& w, const std::vector<float>& x, int n_tokens) {
  std::vector<float> y(size_t(n_tokens) * size_t(w.rows));
  matmul(w, x.data(), n_tokens, y.data());
  return y;
}

TEST(MatmulFloat, CloseToReferenceAndIndependentOfBatch) {
  for (WType type : {WType::F32, WType::F16, WType::BF16})
    for (auto [rows, cols] :
         {std::pair<int64_t, int64_t>{67, 100}, {40, 256}, {9, 13}, {130, 903}}) {
      const Stored s = make(type, rows, cols, uint32_t(rows * 31 + cols));
      for (int n_tokens : {1, 2, 5, 6, 7, 48, 49, 100}) {
        std::mt19937 rng(static_cast<uint32_t>(n_tokens));
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> x(size_t(n_tokens) * size_t(cols));
        for (auto& v : x) v = nd(rng);
        const auto y = run(s.w, x, n_tokens);
        for (int t = 0; t < n_tokens; ++t) {
          const std::vector<float> xt(x.begin() + t * cols, x.begin() + (t + 1) * cols);
          const auto alone = run(s.w, xt, 1);
          ASSERT_EQ(0, std::memcmp(alone.data(), &y[size_t(t) * size_t(rows)], 4 * size_t(rows)))
              << wtype_name(type) << " " << rows << "x" << cols << " token " << t << " of "
              << n_tokens;
          for (int64_t r = 0; r < rows; ++r) {
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < cols; ++k) {
              ref += double(s.values[size_t(r * cols + k)]) * double(xt[size_t(k)]);
              mag += std::fabs(double(s.values[size_t(r * cols + k)]) * double(xt[size_t(k)]));
            }
            ASSERT_NEAR(alone[size_t(r)], ref, 1e-5 * mag + 1e-6)
                << wtype_name(type) << " row " << r;
          }
        }
      }
    }
}

// The AVX-512 prefill kernel keeps every output's AVX2 arithmetic (two rows' 8-lane accumulators
// per register), so the two kernels must agree bit for bit: over column counts that leave every
// 8-column tail, row counts that leave partial 8-row groups and 16-row panels, and token counts
// that leave every 6-token tile remainder, cross the 48-token block and the 64-token switch from
// direct reads to panels, and column counts over one, two (exactly) and several 512-column
// K-blocks (accumulators kept between blocks).
TEST(MatmulFloat, Avx512KernelBitIdenticalToAvx2) {
  if (!kernels::cpu_has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
  for (WType type : {WType::F32, WType::F16, WType::BF16})
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{67, 100},
                              {40, 256},
                              {9, 13},
                              {17, 7},
                              {130, 903},
                              {24, 896},
                              {21, 64},
                              {10, 1024},
                              {11, 1545}}) {
      const Stored s = make(type, rows, cols, uint32_t(rows * 7 + cols));
      for (int n_tokens : {1, 3, 4, 5, 6, 7, 11, 13, 47, 48, 49, 64, 65, 97, 600}) {
        std::mt19937 rng(static_cast<uint32_t>(n_tokens + cols));
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> x(size_t(n_tokens) * size_t(cols));
        for (auto& v : x) v = nd(rng);
        std::vector<float> wide(size_t(n_tokens) * size_t(rows), -1.0f);
        std::vector<float> narrow(size_t(n_tokens) * size_t(rows), -2.0f);
        kernels::matmul_rows_avx512(s.w, x.data(), n_tokens, wide.data(), 0, rows);
        kernels::matmul_rows_avx2(s.w, x.data(), n_tokens, narrow.data(), 0, rows);
        ASSERT_EQ(0, std::memcmp(wide.data(), narrow.data(), 4 * wide.size()))
            << wtype_name(type) << " " << rows << "x" << cols << " n_tokens " << n_tokens;
        // And through the dispatch, with AVX-512 switched off and on.
        kernels::set_avx512_enabled(false);
        const auto off = run(s.w, x, n_tokens);
        kernels::set_avx512_enabled(true);
        const auto on = run(s.w, x, n_tokens);
        ASSERT_EQ(0, std::memcmp(off.data(), on.data(), 4 * on.size()))
            << wtype_name(type) << " " << rows << "x" << cols << " n_tokens " << n_tokens;
      }
    }
}

void bf16_activations_on_one_path();

// BF16 weights with bf16 activations (AVX512-BF16's vdpbf16ps, and AMX-BF16's tile unit where the
// CPU has one): every output the same bits whatever the batch, the tile or the path (matmul,
// matmul_many); each one the exact product of the stored weights and the activations rounded to
// bf16, summed in f32 (close to a double reference of that product); and switched off, the f32
// path's bits again.
TEST(MatmulFloat, Bf16ActivationsIndependentOfBatchAndCloseToReference) {
  if (!bf16_activations_available()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  struct Restore {
    ~Restore() {
      set_bf16_activations(false);
      kernels::set_amx_enabled(true);
    }
  } restore;
  const bool has_amx = kernels::cpu_has_bf16_amx();
  for (const bool amx : {false, true}) {
    if (amx && !has_amx) break;  // the vdpbf16ps path alone is this CPU's
    kernels::set_amx_enabled(amx);
    ASSERT_EQ(amx, kernels::cpu_has_bf16_amx());
    bf16_activations_on_one_path();
  }
}

void bf16_activations_on_one_path() {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{67, 100},
                            {40, 256},
                            {9, 13},
                            {130, 903},
                            {24, 896},
                            {17, 32},
                            {21, 4864}}) {
    const Stored s = make(WType::BF16, rows, cols, uint32_t(rows * 13 + cols));
    for (int n_tokens : {1, 2, 5, 6, 7, 11, 16, 17, 33, 48, 49, 100}) {
      std::mt19937 rng(static_cast<uint32_t>(n_tokens * 3 + cols));
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<float> x(size_t(n_tokens) * size_t(cols));
      for (auto& v : x) v = nd(rng);
      set_bf16_activations(false);
      const auto f32_path = run(s.w, x, n_tokens);
      set_bf16_activations(true);
      ASSERT_TRUE(bf16_activations());
      const auto y = run(s.w, x, n_tokens);
      // matmul_many: the same bits, its two jobs on one x sharing the rounded activations.
      std::vector<float> y1(y.size()), y2(y.size());
      const MatmulJob jobs[2] = {{&s.w, x.data(), n_tokens, y1.data()},
                                 {&s.w, x.data(), n_tokens, y2.data()}};
      matmul_many(jobs);
      ASSERT_EQ(0, std::memcmp(y.data(), y1.data(), 4 * y.size())) << rows << "x" << cols;
      ASSERT_EQ(0, std::memcmp(y.data(), y2.data(), 4 * y.size())) << rows << "x" << cols;
      bool differs = false;
      for (int t = 0; t < n_tokens; ++t) {
        const std::vector<float> xt(x.begin() + t * cols, x.begin() + (t + 1) * cols);
        const auto alone = run(s.w, xt, 1);
        ASSERT_EQ(0, std::memcmp(alone.data(), &y[size_t(t) * size_t(rows)], 4 * size_t(rows)))
            << rows << "x" << cols << " token " << t << " of " << n_tokens;
        for (int64_t r = 0; r < rows; ++r) {
          double rounded = 0, exact = 0, mag = 0;
          for (int64_t k = 0; k < cols; ++k) {
            const double wv = s.values[size_t(r * cols + k)];
            rounded += wv * double(bf16_to_f32(f32_to_bf16(xt[size_t(k)])));
            exact += wv * double(xt[size_t(k)]);
            mag += std::fabs(wv * double(xt[size_t(k)]));
          }
          ASSERT_NEAR(alone[size_t(r)], rounded, 1e-5 * mag + 1e-6) << rows << "x" << cols;
          // bf16 keeps 8 significant bits: within 2^-8 of each product's size of the exact sum.
          ASSERT_NEAR(alone[size_t(r)], exact, mag / 256 + 1e-6) << rows << "x" << cols;
          differs = differs || alone[size_t(r)] != f32_path[size_t(t) * size_t(rows) + size_t(r)];
        }
      }
      EXPECT_TRUE(differs) << "the bf16 path was not taken for " << rows << "x" << cols;
      set_bf16_activations(false);
      const auto again = run(s.w, x, n_tokens);
      ASSERT_EQ(0, std::memcmp(again.data(), f32_path.data(), 4 * again.size()));
    }
  }
}

// On AMX-BF16 the bf16 products are the tile unit's own: other bits than vdpbf16ps' (so the tile
// unit ran, and store keys must tell them apart), the same bits on one thread or four (chunks of
// other sizes and starts), and the same from a view whose rows are further apart than their
// length (the two row groups of a pair then read at different strides where one is padded), its
// gaps NaN so a read past a row would show.
TEST(MatmulFloat, Bf16TileUnitSumsOnAnyThreadsAndRowStride) {
  if (!kernels::cpu_has_bf16_amx()) GTEST_SKIP() << "this CPU has no AMX-BF16";
  struct Restore {
    ~Restore() {
      set_bf16_activations(false);
      kernels::set_amx_enabled(true);
      omp_set_num_threads(omp_get_num_procs());
    }
  } restore;
  set_bf16_activations(true);
  for (auto [rows, cols] :
       {std::pair<int64_t, int64_t>{67, 4864}, {40, 100}, {33, 896}, {16, 32}}) {
    const Stored s = make(WType::BF16, rows, cols, uint32_t(rows + 5 * cols));
    // The same rows 48 elements apart more than their length, the gaps NaN.
    const size_t wide = size_t(cols + 48);
    std::vector<uint16_t> spaced(size_t(rows) * wide, uint16_t(0x7fc0));
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(&spaced[size_t(r) * wide], &s.bytes[size_t(r * cols) * 2], 2 * size_t(cols));
    const WeightMatrix view{WType::BF16, reinterpret_cast<const uint8_t*>(spaced.data()), rows,
                            cols, 2 * wide};
    for (int n_tokens : {1, 3, 33}) {
      std::mt19937 rng(static_cast<uint32_t>(n_tokens + rows));
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<float> x(size_t(n_tokens) * size_t(cols));
      for (auto& v : x) v = nd(rng);
      kernels::set_amx_enabled(true);
      const auto tiles = run(s.w, x, n_tokens);
      for (int threads : {1, 4}) {
        omp_set_num_threads(threads);
        ASSERT_EQ(0, std::memcmp(run(s.w, x, n_tokens).data(), tiles.data(), 4 * tiles.size()))
            << rows << "x" << cols << " threads " << threads;
        ASSERT_EQ(0, std::memcmp(run(view, x, n_tokens).data(), tiles.data(), 4 * tiles.size()))
            << rows << "x" << cols << " spaced rows, threads " << threads;
      }
      omp_set_num_threads(omp_get_num_procs());
      kernels::set_amx_enabled(false);
      const auto dot = run(s.w, x, n_tokens);
      bool differs = false;
      for (size_t i = 0; i < tiles.size(); ++i) {
        ASSERT_NEAR(tiles[i], dot[i], 1e-3 * (1 + std::fabs(dot[i]))) << rows << "x" << cols;
        differs = differs || tiles[i] != dot[i];
      }
      // Thousands of terms a row: the two ways of summing part somewhere.
      if (cols >= 896) {
        EXPECT_TRUE(differs) << rows << "x" << cols << " n_tokens " << n_tokens;
      }
    }
  }
}

// Threads share a product's rows in chunks: every row exactly once, in whole row groups (the tiles
// need them), and for one token long streams first, shrinking to the end (so the threads finish
// together); for more tokens equal chunks.
TEST(RowChunks, CoverEveryRowOnceInWholeGroups) {
  for (int n_tokens : {1, 2, 64})
    for (int threads : {1, 2, 3, 8})
      for (int64_t rows : {int64_t(16), int64_t(128), int64_t(896), int64_t(4864), int64_t(151936),
                           int64_t(100)}) {
        std::vector<kernels::RowChunk> chunks;
        kernels::append_row_chunks(chunks, 3, rows, 16, threads, n_tokens);
        ASSERT_FALSE(chunks.empty());
        int64_t next = 0;
        for (size_t i = 0; i < chunks.size(); ++i) {
          const kernels::RowChunk& c = chunks[i];
          EXPECT_EQ(c.job, 3u);
          EXPECT_EQ(c.r0, next) << rows << " rows, chunk " << i;
          EXPECT_GT(c.r1, c.r0);
          EXPECT_EQ(c.r0 % 16, 0);
          if (c.r1 != rows) {
            EXPECT_EQ(c.r1 % 16, 0);
          }
          if (n_tokens == 1 && i > 0) {
            EXPECT_LE(c.r1 - c.r0, chunks[i - 1].r1 - chunks[i - 1].r0);
          }
          next = c.r1;
        }
        EXPECT_EQ(next, rows);
        if (n_tokens == 1 && threads > 1 && rows >= 896) {
          EXPECT_GE(chunks.front().r1 * threads, rows);  // the first is a whole thread's share
          EXPECT_LE(chunks.back().r1 - chunks.back().r0, 32);
        }
      }
}

// Several matrices split in turn for one token (a MoE layer's experts): whole matrices go to a
// thread while much work is left after them, and only the last ones are shared.
TEST(RowChunks, ManyMatricesGoWholeUntilTheLastOnes) {
  std::vector<kernels::RowChunk> chunks;
  constexpr int kJobs = 16, kRows = 768;
  for (int i = 0; i < kJobs; ++i)
    kernels::append_row_chunks(chunks, size_t(i), kRows, 16, 2, 1, int64_t(kJobs - 1 - i) * kRows);
  std::vector<int64_t> covered(kJobs, 0);
  int split_jobs = 0;
  for (const kernels::RowChunk& c : chunks) covered[c.job] += c.r1 - c.r0;
  for (int i = 0; i < kJobs; ++i) {
    EXPECT_EQ(covered[size_t(i)], kRows);
    const auto n = std::count_if(chunks.begin(), chunks.end(),
                                 [&](const kernels::RowChunk& c) { return c.job == size_t(i); });
    if (n > 1) ++split_jobs;
    if (i < kJobs - 2) {
      EXPECT_EQ(n, 1) << "job " << i;
    }
  }
  EXPECT_GE(split_jobs, 1);  // the tail is shared, so the threads finish together
}

}  // namespace
}  // namespace fak
