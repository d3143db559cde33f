// Quantised matmul: every weight type against the dequantised-weights float reference, and the
// bit-determinism rule of matmul.h (batch size, tiles, threads never change an output).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "ops/matmul.h"
#include "ops/matmul_kernels.h"
#include "quant/quant.h"
#include "quant/quant_blocks.h"

namespace fak {
namespace {

const WType kQuantTypes[] = {WType::Q8_0, WType::Q4_0,   WType::Q4_1,  WType::Q5_0,  WType::Q5_1,
                             WType::Q4_K, WType::Q5_K,   WType::Q6_K,  WType::MXFP4, WType::Q2_K,
                             WType::Q3_K, WType::IQ4_NL, WType::IQ4_XS};

struct Quantised {
  std::vector<uint8_t> bytes;
  WeightMatrix w;
};

Quantised make_matrix(WType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  Quantised q;
  const QuantType qt = *wtype_quant(type);
  const size_t rb = row_bytes(qt, cols);
  q.bytes.resize(rb * size_t(rows));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = dist(rng);
    quantize_row(qt, row.data(), q.bytes.data() + size_t(r) * rb, cols);
  }
  q.w = {type, q.bytes.data(), rows, cols, rb};
  EXPECT_EQ(rb, wtype_row_bytes(type, cols));
  return q;
}

std::vector<float> activations(int n_tokens, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(size_t(n_tokens) * size_t(cols));
  for (float& v : x) v = dist(rng);
  return x;
}

std::vector<float> run(const WeightMatrix& w, const std::vector<float>& x, int n_tokens) {
  std::vector<float> y(size_t(n_tokens) * size_t(w.rows));
  matmul(w, x.data(), n_tokens, y.data());
  return y;
}

class MatmulQuant : public ::testing::TestWithParam<WType> {};

// The engine's answer is the integer dot of the weights with the *quantised* activations, so the
// tight check dequantises both sides (only float summation order differs: 1e-4 of the row's
// magnitude); the loose one bounds the activation quantisation error against float x.
TEST_P(MatmulQuant, MatchesDequantisedReference) {
  const WType type = GetParam();
  const QuantType qt = *wtype_quant(type);
  const QuantType at = dot_activation_type(qt);
  for (int64_t cols : {256, 768, 1024 + 512}) {
    const int64_t rows = 37;
    const int n_tokens = 5;
    Quantised m = make_matrix(type, rows, cols, uint32_t(cols));
    std::vector<float> x = activations(n_tokens, cols, 11);
    std::vector<float> y = run(m.w, x, n_tokens);
    std::vector<float> wrow(static_cast<size_t>(cols)), xq(static_cast<size_t>(cols));
    std::vector<uint8_t> aq(row_bytes(at, cols));
    for (int t = 0; t < n_tokens; ++t) {
      const float* xt = &x[size_t(t) * size_t(cols)];
      quantize_row(at, xt, aq.data(), cols);
      dequantize_row(at, aq.data(), xq.data(), cols);
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(m.w, r, wrow.data());
        double exact = 0, loose = 0, mag = 0;
        for (int64_t k = 0; k < cols; ++k) {
          exact += double(wrow[size_t(k)]) * xq[size_t(k)];
          loose += double(wrow[size_t(k)]) * xt[k];
          mag += std::fabs(double(wrow[size_t(k)]) * xt[k]);
        }
        const float got = y[size_t(t) * size_t(rows) + size_t(r)];
        ASSERT_NEAR(got, exact, 1e-4 * mag) << wtype_name(type) << " cols " << cols << " r " << r;
        ASSERT_NEAR(got, loose, 0.02 * mag) << wtype_name(type) << " cols " << cols << " r " << r;
      }
    }
  }
}

// Prefill == decode: every output of a batched call is bit-identical to the same token alone, to
// the plain vec_dot path (tiles off), and to a single-threaded run. Row counts that are not
// multiples of the 8-row panels and token counts that leave every tile remainder are the point.
TEST_P(MatmulQuant, OutputsDoNotDependOnBatchTilesOrThreads) {
  const WType type = GetParam();
  const bool k_quant = wtype_block(type) == 256;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{67, 512},
                            {5, k_quant ? 768 : 96},
                            {24, k_quant ? 1280 : 896}}) {
    Quantised m = make_matrix(type, rows, cols, 3);
    for (int n_tokens : {1, 2, 3, 4, 5, 7, 9, 17, 64, 65}) {
      std::vector<float> x = activations(n_tokens, cols, uint32_t(n_tokens));
      std::vector<float> batched = run(m.w, x, n_tokens);
      kernels::set_quant_tiles_enabled(false);
      std::vector<float> plain = run(m.w, x, n_tokens);
      kernels::set_quant_tiles_enabled(true);
      const int threads = omp_get_max_threads();
      omp_set_num_threads(1);
      std::vector<float> single = run(m.w, x, n_tokens);
      omp_set_num_threads(threads);
      ASSERT_EQ(0, std::memcmp(batched.data(), plain.data(), 4 * batched.size()))
          << wtype_name(type) << " tiles vs vec_dot, rows " << rows << " n_tokens " << n_tokens;
      ASSERT_EQ(0, std::memcmp(batched.data(), single.data(), 4 * batched.size()))
          << wtype_name(type) << " threads, rows " << rows << " n_tokens " << n_tokens;
      for (int t = 0; t < n_tokens; ++t) {
        std::vector<float> xt(x.begin() + t * cols, x.begin() + (t + 1) * cols);
        std::vector<float> alone = run(m.w, xt, 1);
        ASSERT_EQ(0,
                  std::memcmp(alone.data(), &batched[size_t(t) * size_t(rows)], 4 * size_t(rows)))
            << wtype_name(type) << " rows " << rows << " token " << t << " of " << n_tokens;
      }
    }
  }
}

// The VNNI kernels (16-row panels) against the AVX2 ones (8-row panels): the same bits for row
// counts that leave partial 16-row panels and 8-row remainders, and token counts that leave every
// tile remainder (tiles of 8 tokens for the 32-element types, 6 for the K-quants; a call of up
// to 3 tokens takes the decode kernel instead, 8 without AVX-512).
TEST_P(MatmulQuant, Avx512TilesBitIdenticalToAvx2) {
  if (!kernels::cpu_has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
  const WType type = GetParam();
  const bool k_quant = wtype_block(type) == 256;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{16, k_quant ? 256 : 32},
                            {67, 512},
                            {130, k_quant ? 1280 : 896},
                            {40, k_quant ? 768 : 160}}) {
    Quantised m = make_matrix(type, rows, cols, 7);
    for (int n_tokens : {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17, 20, 64, 65, 600}) {
      std::vector<float> x = activations(n_tokens, cols, uint32_t(3 * n_tokens + 1));
      kernels::set_avx512_enabled(false);
      std::vector<float> narrow = run(m.w, x, n_tokens);
      kernels::set_avx512_enabled(true);
      std::vector<float> wide = run(m.w, x, n_tokens);
      ASSERT_EQ(0, std::memcmp(narrow.data(), wide.data(), 4 * wide.size()))
          << wtype_name(type) << " rows " << rows << " cols " << cols << " n_tokens " << n_tokens;
    }
  }
}

// AMX (tiles of 16 tokens whose integer sums come from the tile unit) against the VPDPBUSD tiles:
// the same bits, for token counts that leave VNNI remainders after whole AMX tiles and column
// counts whose blocks do not fill the tile's chunks of 8, on rows as stored and packed at load
// (the 32-element types, and the K-quants and iq4_xs through their scale-digit planes).
TEST_P(MatmulQuant, AmxTilesBitIdenticalToVnni) {
  if (!kernels::cpu_has_amx_int8()) GTEST_SKIP() << "this CPU (or OS) grants no AMX-INT8";
  const WType type = GetParam();
  const bool k_quant = wtype_block(type) == 256;
  if (kernels::amx_sum_factor(*wtype_quant(type)) == 0 && type != WType::Q4_K &&
      type != WType::Q5_K)
    GTEST_SKIP() << wtype_name(type) << " has no AMX tiles";
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{16, k_quant ? 256 : 32},
                            {67, k_quant ? 1280 : 896},
                            {48, k_quant ? 512 : 160}}) {
    for (bool packed : {false, true}) {
      Quantised m = make_matrix(type, rows, cols, 13);
      if (packed && !pack_weight_panels(m.w, m.bytes.data())) continue;
      // Fewer than 16, and remainders past whole tiles: a padded last tile from
      // kAmxFewestTokens tokens (10, 12, 15 left), the VNNI tiles below it (1, 5, 7 left); packed
      // q8_0's 8-row tiles for 8 left (8; 24 after a whole tile).
      for (int n_tokens : {5, 7, 8, 10, 12, 16, 17, 21, 24, 26, 31, 32, 47, 64, 600}) {
        std::vector<float> x = activations(n_tokens, cols, uint32_t(7 * n_tokens + 3));
        kernels::set_amx_enabled(false);
        std::vector<float> vnni = run(m.w, x, n_tokens);
        kernels::set_amx_enabled(true);
        std::vector<float> amx = run(m.w, x, n_tokens);
        ASSERT_EQ(0, std::memcmp(vnni.data(), amx.data(), 4 * amx.size()))
            << wtype_name(type) << (packed ? " packed" : "") << " rows " << rows << " cols " << cols
            << " n_tokens " << n_tokens;
      }
    }
  }
}

// The K-quant AMX planes on blocks of random bytes (every scale and code a block can hold, which
// quantised smooth weights rarely reach: q6_K scales of +-127, q5_K codes of 31 under a scale of
// 63), only their fp16 super-block scales set to small normal values: the VNNI tiles' bits, rows as
// stored and packed.
template <class Block>
std::vector<uint8_t> raw_blocks(int64_t rows, int64_t cols, size_t row_bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(row_bytes * size_t(rows));
  for (uint8_t& b : bytes) b = uint8_t(rng());
  std::uniform_real_distribution<float> scale(0.001f, 0.01f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / 256; ++b) {
      auto& blk = *reinterpret_cast<Block*>(bytes.data() + size_t(r) * row_bytes +
                                            size_t(b) * sizeof(Block));
      if constexpr (requires { blk.dmin; }) blk.dmin = f32_to_f16(scale(rng));
      blk.d = f32_to_f16(rng() & 1 ? scale(rng) : -scale(rng));
    }
  return bytes;
}

template <class Block>
void expect_amx_planes_match_vnni(WType type) {
  const int64_t cols = 768;
  const QuantType qt = *wtype_quant(type);
  const size_t rb = row_bytes(qt, cols);
  for (int64_t rows : {48, 67}) {
    std::vector<uint8_t> stored =
        raw_blocks<Block>(rows, cols, rb, uint32_t(rows) * 31 + uint32_t(type));
    std::vector<uint8_t> packed_bytes = stored;
    const WeightMatrix w{type, stored.data(), rows, cols, rb};
    WeightMatrix packed{type, packed_bytes.data(), rows, cols, rb};
    const bool has_packed = pack_weight_panels(packed, packed_bytes.data());
    for (int n_tokens : {10, 16, 17, 33}) {
      const std::vector<float> x = activations(n_tokens, cols, uint32_t(n_tokens));
      kernels::set_amx_enabled(false);
      const std::vector<float> vnni = run(w, x, n_tokens);
      kernels::set_amx_enabled(true);
      EXPECT_EQ(0, std::memcmp(vnni.data(), run(w, x, n_tokens).data(), 4 * vnni.size()))
          << wtype_name(type) << " rows " << rows << " n_tokens " << n_tokens;
      if (has_packed) {
        EXPECT_EQ(0, std::memcmp(vnni.data(), run(packed, x, n_tokens).data(), 4 * vnni.size()))
            << wtype_name(type) << " packed, rows " << rows << " n_tokens " << n_tokens;
      }
    }
  }
}

TEST(MatmulQuantAmx, PlanesOnRawBlocksGiveTheVnniBits) {
  if (!kernels::cpu_has_amx_int8()) GTEST_SKIP() << "this CPU (or OS) grants no AMX-INT8";
  expect_amx_planes_match_vnni<quant::BlockQ2K>(WType::Q2_K);
  expect_amx_planes_match_vnni<quant::BlockQ3K>(WType::Q3_K);
  expect_amx_planes_match_vnni<quant::BlockQ4K>(WType::Q4_K);
  expect_amx_planes_match_vnni<quant::BlockQ5K>(WType::Q5_K);
  expect_amx_planes_match_vnni<quant::BlockQ6K>(WType::Q6_K);
  expect_amx_planes_match_vnni<quant::BlockIq4Xs>(WType::IQ4_XS);
}

TEST_P(MatmulQuant, DequantizeRowMatchesBlockDequantize) {
  const WType type = GetParam();
  Quantised m = make_matrix(type, 3, 512, 5);
  std::vector<float> a(512), b(512);
  for (int64_t r = 0; r < 3; ++r) {
    dequantize_row(m.w, r, a.data());
    dequantize_row(*wtype_quant(type), m.w.row(r), b.data(), 512);
    EXPECT_EQ(a, b);
  }
}

// Weights packed once into the VNNI panels (pack_weight_panels): every call, from one token up, on
// any thread count, and every row lookup give the bits the stored rows give; a matrix it cannot
// pack is left as it was.
class MatmulQuantPacked : public ::testing::TestWithParam<WType> {};

TEST_P(MatmulQuantPacked, PanelsGiveTheBitsOfTheRows) {
  if (!kernels::cpu_has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
  const WType type = GetParam();
  const bool k_quant = wtype_block(type) == 256;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{16, k_quant ? 256 : 32},
                            {48, k_quant ? 1024 : 896},
                            {160, 256},
                            // Rows wide enough that a call goes in several blocks of rows and of
                            // tokens (rows_packed16's L2 blocks), the last of each partly filled.
                            {80, 12288}}) {
    Quantised stored = make_matrix(type, rows, cols, 11);
    Quantised packed = make_matrix(type, rows, cols, 11);
    ASSERT_TRUE(pack_weight_panels(packed.w, packed.bytes.data()));
    EXPECT_TRUE(packed.w.panels);
    EXPECT_EQ(packed.bytes.size(), stored.bytes.size());
    EXPECT_NE(packed.bytes, stored.bytes);  // rewritten, so the checks below test the panels
    for (int n_tokens : {1, 2, 3, 4, 5, 8, 9, 12, 16, 17, 24, 30, 33, 64, 600}) {
      std::vector<float> x = activations(n_tokens, cols, uint32_t(5 * n_tokens + 2));
      const std::vector<float> want = run(stored.w, x, n_tokens);
      ASSERT_EQ(0, std::memcmp(want.data(), run(packed.w, x, n_tokens).data(), 4 * want.size()))
          << "rows " << rows << " cols " << cols << " n_tokens " << n_tokens;
      const int threads = omp_get_max_threads();
      omp_set_num_threads(1);
      const std::vector<float> single = run(packed.w, x, n_tokens);
      omp_set_num_threads(threads);
      ASSERT_EQ(0, std::memcmp(want.data(), single.data(), 4 * want.size()))
          << "one thread, rows " << rows << " n_tokens " << n_tokens;
    }
    std::vector<float> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(stored.w, r, a.data());
      dequantize_row(packed.w, r, b.data());
      ASSERT_EQ(a, b) << "row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PackedTypes, MatmulQuantPacked,
                         ::testing::Values(WType::Q8_0, WType::Q4_0, WType::Q4_1, WType::Q5_0,
                                           WType::Q5_1, WType::Q4_K, WType::Q5_K, WType::Q6_K,
                                           WType::MXFP4, WType::Q2_K, WType::Q3_K, WType::IQ4_XS,
                                           WType::IQ4_NL),
                         [](const auto& info) { return std::string(wtype_name(info.param)); });

// q4_K at the edge of its integer range: codes 12-15 under the largest sub-block scales (63),
// activations 80-127 of one sign, so each block's Σ sc_s t_s passes 2^24 and its float must round.
// The tiles sum sc_s t_s in floats (two exact halves); their outputs must stay vec_dot's, packed or
// not, at every token count.
TEST(MatmulQuantEdges, LargestQ4KSumsGiveTheBitsOfVecDot) {
  const int64_t rows = 48, cols = 1024;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> code(12, 15), half_bits(0x3000, 0x3800);
  Quantised m;
  m.bytes.resize(size_t(rows) * wtype_row_bytes(WType::Q4_K, cols));
  auto* blocks = reinterpret_cast<quant::BlockQ4K*>(m.bytes.data());
  for (int64_t b = 0; b < rows * cols / 256; ++b) {
    quant::BlockQ4K& blk = blocks[b];
    blk.d = uint16_t(half_bits(rng));
    blk.dmin = uint16_t(half_bits(rng));
    std::memset(blk.scales, 0xFF, sizeof(blk.scales));  // every sc and m 63
    for (uint8_t& q : blk.qs) q = uint8_t(code(rng) | code(rng) << 4);
  }
  m.w = {WType::Q4_K, m.bytes.data(), rows, cols, wtype_row_bytes(WType::Q4_K, cols)};
  Quantised packed = m;
  packed.w.data = packed.bytes.data();
  const bool has_packed = pack_weight_panels(packed.w, packed.bytes.data());
  std::uniform_real_distribution<float> act(0.63f, 1.0f);
  for (int n_tokens : {1, 6, 7, 64}) {
    std::vector<float> x(size_t(n_tokens) * size_t(cols));
    for (size_t i = 0; i < x.size(); ++i) x[i] = (i / size_t(cols)) % 2 ? -act(rng) : act(rng);
    const std::vector<float> tiled = run(m.w, x, n_tokens);
    kernels::set_quant_tiles_enabled(false);
    const std::vector<float> plain = run(m.w, x, n_tokens);
    kernels::set_quant_tiles_enabled(true);
    ASSERT_EQ(0, std::memcmp(tiled.data(), plain.data(), 4 * tiled.size())) << n_tokens;
    if (has_packed) {
      ASSERT_EQ(0, std::memcmp(run(packed.w, x, n_tokens).data(), plain.data(), 4 * plain.size()))
          << "packed, n_tokens " << n_tokens;
    }
  }
}

TEST(MatmulQuantPacking, LeavesWhatItCannotPack) {
  for (auto [type, rows] : {std::pair<WType, int64_t>{WType::Q8_0, 40},
                            {WType::Q4_K, 24},
                            {WType::Q6_K, 24},
                            {WType::Q5_0, 56},
                            {WType::Q3_K, 24},
                            {WType::IQ4_NL, 40}}) {
    Quantised m = make_matrix(type, rows, 256, 1);
    const std::vector<uint8_t> before = m.bytes;
    EXPECT_FALSE(pack_weight_panels(m.w, m.bytes.data())) << wtype_name(type) << " rows " << rows;
    EXPECT_FALSE(m.w.panels);
    EXPECT_EQ(m.bytes, before);
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulQuant, ::testing::ValuesIn(kQuantTypes),
                         [](const auto& info) { return std::string(wtype_name(info.param)); });

TEST(MatmulQuantTypes, WTypeMirrorsQuantType) {
  for (WType t : kQuantTypes) {
    ASSERT_TRUE(wtype_quant(t));
    EXPECT_EQ(wtype_from_quant(*wtype_quant(t)), t);
    EXPECT_EQ(wtype_block(t), quant_block_size(*wtype_quant(t)));
    EXPECT_EQ(wtype_row_bytes(t, 4096), row_bytes(*wtype_quant(t), 4096));
    EXPECT_EQ(wtype_name(t), quant_type_name(*wtype_quant(t)));
  }
  EXPECT_FALSE(wtype_quant(WType::BF16));
  EXPECT_FALSE(wtype_from_quant(QuantType::Q8_K));
}

}  // namespace
}  // namespace fak

namespace fak {
namespace {

// The fused AVX-512 activation quantiser against the scalar reference: the same blocks byte for
// byte, each block's fp16 scale widened and the sum of its quants, for rows of 1-40 blocks (whole
// groups of 16 and the partial group after them) and blocks whose scale is zero, a subnormal or an
// infinite half, or ordinary.
TEST(QuantizeActivations, FusedQ8_0MatchesTheReference) {
  if (!kernels::cpu_has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512";
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  // 1e-38: 1 / d is infinite (the quants +-127, zeros 0); 1e-41: subnormal inputs.
  const float magnitudes[] = {0.0f, 1e-41f, 1e-38f, 1e-9f, 3e-6f, 1e-3f, 1.0f, 40.0f, 1e5f, 3e7f};
  const QuantKernels& ref = quant::scalar_kernels();
  for (int64_t nb : {1, 2, 7, 15, 16, 17, 24, 28, 32, 40}) {
    const int64_t cols = 32 * nb;
    for (int trial = 0; trial < 8; ++trial) {
      std::vector<float> x(static_cast<size_t>(cols));
      for (int64_t b = 0; b < nb; ++b) {
        const float scale = magnitudes[size_t(rng() % std::size(magnitudes))];
        for (int j = 0; j < 32; ++j) x[size_t(32 * b + j)] = j % 7 == 3 ? 0.0f : scale * dist(rng);
      }
      if (trial == 0) {  // a block with d = 1 and ties: rint's nearest even (2.5 -> 2, -0.5 -> 0)
        const float ties[] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 1.5f, 126.5f, -3.5f};
        for (int j = 0; j < 32; ++j) x[size_t(j)] = ties[j % 8];
      }
      std::vector<uint8_t> want(size_t(nb) * sizeof(quant::BlockQ8_0));
      ref.quantize_q8_0(x.data(), want.data(), cols);
      std::vector<uint8_t> got(want.size() + 1, 0xAA);
      std::vector<float> scales(size_t(nb) + 1, -1.0f);
      std::vector<int32_t> sums(size_t(nb) + 1, -1);
      kernels::quantize_q8_0_act_avx512(x.data(), cols, got.data(), scales.data(), sums.data());
      EXPECT_EQ(got.back(), 0xAA) << "wrote past the last block";
      got.pop_back();
      ASSERT_EQ(got, want) << nb << " blocks, trial " << trial;
      const auto* blocks = reinterpret_cast<const quant::BlockQ8_0*>(want.data());
      for (int64_t b = 0; b < nb; ++b) {
        const float d = f16_to_f32(blocks[b].d);
        EXPECT_EQ(std::memcmp(&scales[size_t(b)], &d, 4), 0) << "block " << b;
        int32_t sum = 0;
        for (int8_t v : blocks[b].qs) sum += v;
        EXPECT_EQ(sums[size_t(b)], sum) << "block " << b;
      }
      EXPECT_EQ(scales[size_t(nb)], -1.0f) << "wrote past the last block's scale";
      EXPECT_EQ(sums[size_t(nb)], -1) << "wrote past the last block's sum";
    }
  }
}

// The same for Q8_K (the K-quants' activations): d, quants, the 16 sums of 16 and the 8 of 32, byte
// for byte.
TEST(QuantizeActivations, FusedQ8_KMatchesTheReference) {
  if (!kernels::cpu_has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512";
  std::mt19937 rng(12);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const float magnitudes[] = {0.0f, 1e-41f, 1e-38f, 1e-30f, 1e-9f, 1e-3f, 1.0f, 40.0f, 3e7f};
  const QuantKernels& ref = quant::scalar_kernels();
  for (int64_t nb : {1, 3, 8}) {
    const int64_t cols = 256 * nb;
    for (int trial = 0; trial < 16; ++trial) {
      std::vector<float> x(static_cast<size_t>(cols));
      for (int64_t b = 0; b < nb; ++b) {
        const float scale = magnitudes[size_t(rng() % std::size(magnitudes))];
        for (int j = 0; j < 256; ++j)
          x[size_t(256 * b + j)] = j % 7 == 3 ? 0.0f : scale * dist(rng);
      }
      std::vector<uint8_t> want(size_t(nb) * sizeof(quant::BlockQ8K));
      ref.quantize_q8_k(x.data(), want.data(), cols);
      std::vector<uint8_t> got(want.size() + 1, 0xAA);
      kernels::quantize_q8_k_act_avx512(x.data(), cols, got.data());
      EXPECT_EQ(got.back(), 0xAA) << "wrote past the last block";
      got.pop_back();
      ASSERT_EQ(got, want) << nb << " blocks, trial " << trial;
    }
  }
}

// A MoE layer's experts take their tokens by row (MatmulJob::x_rows) from the layer's tokens
// quantised once (QuantizedRows): each job's outputs are the bits matmul gives on those rows
// gathered, whether its weights take the quantised rows (q8_0, stored and packed), were quantised
// for another activation type (q4_K's Q8_K: it quantises its own), or are float (f32); and two
// jobs on different rows of the same x never share activations.
TEST(MatmulMany, TokensTakenByRowGiveTheBitsOfTheirRowsGathered) {
  const int64_t cols = 256;
  const int n_x = 40;
  const std::vector<float> x = activations(n_x, cols, 21);
  const std::vector<int32_t> rows_a = {3,  17, 3,  39, 0, 8,  22, 5,  31, 12, 9,
                                       30, 11, 27, 2,  6, 38, 14, 19, 25, 1};
  const std::vector<int32_t> rows_b = {4, 10, 33, 36, 7, 16, 20, 23, 26, 29, 35, 37};
  Quantised q8 = make_matrix(WType::Q8_0, 48, cols, 1);
  Quantised q8_packed = make_matrix(WType::Q8_0, 48, cols, 1);
  const bool packed = pack_weight_panels(q8_packed.w, q8_packed.bytes.data());
  Quantised q4k = make_matrix(WType::Q4_K, 48, cols, 2);
  std::vector<float> f32(48 * size_t(cols));
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = 0.01f * float(int(i % 97) - 48);
  const WeightMatrix wf{WType::F32, f32.data(), 48, cols, 4 * size_t(cols)};
  const QuantizedRows xq(WType::Q8_0, x.data(), n_x, cols);
  ASSERT_NE(xq.prepared(), nullptr);
  struct Case {
    const WeightMatrix* w;
    const std::vector<int32_t>* rows;
  };
  const Case cases[] = {{&q8.w, &rows_a},        {&q4k.w, &rows_a}, {&wf, &rows_a},
                        {&q8_packed.w, &rows_a}, {&q8.w, &rows_b},  {&q4k.w, &rows_b},
                        {&wf, &rows_b}};
  std::vector<std::vector<float>> got(std::size(cases));
  std::vector<MatmulJob> jobs;
  for (size_t c = 0; c < std::size(cases); ++c) {
    const int n = int(cases[c].rows->size());
    got[c].assign(size_t(n) * 48, -1.0f);
    jobs.push_back({cases[c].w, x.data(), n, got[c].data(), cases[c].rows->data(), &xq});
  }
  matmul_many(jobs);
  for (size_t c = 0; c < std::size(cases); ++c) {
    const std::vector<int32_t>& rows = *cases[c].rows;
    std::vector<float> gathered(rows.size() * size_t(cols));
    for (size_t t = 0; t < rows.size(); ++t)
      std::memcpy(&gathered[t * size_t(cols)], &x[size_t(rows[t]) * size_t(cols)],
                  4 * size_t(cols));
    const std::vector<float> want = run(*cases[c].w, gathered, int(rows.size()));
    ASSERT_EQ(want.size(), got[c].size());
    EXPECT_EQ(std::memcmp(want.data(), got[c].data(), 4 * want.size()), 0)
        << "case " << c << " (" << wtype_name(cases[c].w->type)
        << (cases[c].w->panels ? ", packed" : "") << ")";
  }
  if (!packed) std::printf("(q8_0 not packed on this CPU: the packed case ran on stored rows)\n");
}

}  // namespace
}  // namespace fak
