// q2_K, q3_K, iq4_xs and iq4_nl against llama.cpp itself: fak's dequantisation must give ggml's
// floats bit for bit, fak's quantisers ggml's bytes (llama-quantize without an imatrix), and the
// dot products the dot of the dequantised values.
//
// How tests/data/quant/<type>.bin were made (a throwaway harness, not kept in the repo): llama.cpp
// at commit 34af94cd (github.com/ggml-org/llama.cpp, mirrored as unslothai/llama.cpp), its
// ggml/src/ggml-quants.c compiled alone with `gcc -O2 -ffp-contract=off` for baseline x86-64 (as
// ggml-base is built: nothing fuses), linked against a small C driver with stubs for ggml_abort /
// ggml_row_size. The driver drew blocks from splitmix64: every byte of codes and scales random (so
// every code value and every 4/6-bit scale occurs), the fp16 super-scales random finite values with
// a quarter of them edge cases (±0, the smallest and largest subnormals, the smallest normal,
// ±65504, ±1, some negative). For each block it ran dequantize_row_<type> and stored the FNV-1a
// 64-bit hash of the output floats' bytes (and the floats themselves for the first few blocks).
// It also quantised rows of inputs with quantize_<type>(..., imatrix = NULL), llama-quantize's
// path, and stored inputs and bytes: one case per super-block (Gaussian at 1, 2^-30 and 4096,
// one-signed, outliers, zero and signed-zero sub-blocks, constant, all zero, small integers,
// magnitudes that change per sub-block, sparse). File layout: "FAKQREF1", 8 u32 (ggml type, block
// elements, block bytes, n_blocks, n_full, n_rows, row elements, 0), then the blocks, the n_blocks
// u64 hashes, n_full blocks of floats, n_rows input rows (f32) and their quantised bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include "quant/quant.h"
#include "test_util.h"

namespace fak {
namespace {

struct Fixture {
  QuantType type{};
  int block_elems = 0;
  size_t block_bytes = 0;
  int n_blocks = 0, n_full = 0, n_rows = 0, row_elems = 0;
  std::vector<uint8_t> blocks;
  std::vector<uint64_t> hashes;
  std::vector<float> full;    // llama.cpp's floats of the first n_full blocks
  std::vector<float> inputs;  // [n_rows][row_elems]
  std::vector<uint8_t> quantised;
};

Fixture load(const std::string& name) {
  std::ifstream f(test::data_path("quant/" + name + ".bin"), std::ios::binary);
  EXPECT_TRUE(f) << name;
  char magic[8] = {};
  uint32_t h[8] = {};
  f.read(magic, 8);
  f.read(reinterpret_cast<char*>(h), sizeof h);
  EXPECT_EQ(std::string(magic, 8), "FAKQREF1");
  Fixture x;
  x.type = QuantType(h[0]);
  x.block_elems = int(h[1]);
  x.block_bytes = h[2];
  x.n_blocks = int(h[3]);
  x.n_full = int(h[4]);
  x.n_rows = int(h[5]);
  x.row_elems = int(h[6]);
  auto read = [&f](auto& v, size_t n) {
    v.resize(n);
    f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * sizeof(v[0])));
  };
  read(x.blocks, size_t(x.n_blocks) * x.block_bytes);
  read(x.hashes, size_t(x.n_blocks));
  read(x.full, size_t(x.n_full) * size_t(x.block_elems));
  read(x.inputs, size_t(x.n_rows) * size_t(x.row_elems));
  read(x.quantised, size_t(x.n_rows) * row_bytes(x.type, x.row_elems));
  EXPECT_TRUE(f) << name << ": truncated";
  EXPECT_EQ(f.peek(), EOF) << name << ": trailing bytes";
  return x;
}

uint64_t fnv1a(const float* y, int n) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const uint8_t*>(y);
  for (size_t i = 0; i < 4 * size_t(n); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

class LowbitFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(LowbitFixture, FileIsTheType) {
  const Fixture x = load(GetParam());
  EXPECT_EQ(quant_type_name(x.type), GetParam());
  EXPECT_EQ(x.block_elems, quant_block_size(x.type));
  EXPECT_EQ(x.block_bytes, quant_block_bytes(x.type));
  EXPECT_GE(x.n_blocks, 256);
}

// Bit for bit, block by block; the first few blocks also value by value, for a readable failure.
TEST_P(LowbitFixture, DequantisesToGgmlsFloats) {
  const Fixture x = load(GetParam());
  std::vector<float> y(size_t(x.block_elems));
  int mismatched = 0;
  for (int b = 0; b < x.n_blocks; ++b) {
    dequantize_row(x.type, x.blocks.data() + size_t(b) * x.block_bytes, y.data(), x.block_elems);
    if (b < x.n_full)
      for (int e = 0; e < x.block_elems; ++e) {
        const float want = x.full[size_t(b) * size_t(x.block_elems) + size_t(e)];
        ASSERT_EQ(std::memcmp(&y[size_t(e)], &want, 4), 0)
            << GetParam() << " block " << b << " element " << e << ": " << y[size_t(e)]
            << " vs ggml " << want;
      }
    if (fnv1a(y.data(), x.block_elems) != x.hashes[size_t(b)] && ++mismatched <= 5)
      ADD_FAILURE() << GetParam() << " block " << b << " dequantises to other bits than ggml's";
  }
  EXPECT_EQ(mismatched, 0);
}

// llama-quantize's bytes (no imatrix) for every input case, and the round trip stays sane.
TEST_P(LowbitFixture, QuantisesToGgmlsBytes) {
  const Fixture x = load(GetParam());
  const size_t rb = row_bytes(x.type, x.row_elems);
  std::vector<uint8_t> got(rb);
  for (int r = 0; r < x.n_rows; ++r) {
    const float* in = x.inputs.data() + size_t(r) * size_t(x.row_elems);
    quantize_row(x.type, in, got.data(), x.row_elems);
    const uint8_t* want = x.quantised.data() + size_t(r) * rb;
    for (size_t b = 0; b < rb / x.block_bytes; ++b) {
      const size_t at = b * x.block_bytes;
      ASSERT_EQ(0, std::memcmp(got.data() + at, want + at, x.block_bytes))
          << GetParam() << " row " << r << " block " << b;
    }
  }
}

// Rows of the fixture's blocks (every edge scale among them) against activations quantised by
// fak: each kernel variant's dot within dot products' tolerance of quant_test (1e-5 of
// Σ (|w| + max|w|) |a|, which bounds every term summed, mins included) of the float64 dot of the
// dequantised values, and every SIMD variant the scalar reference's exact bits (the block-serial
// rule of dot_ref.cpp).
TEST_P(LowbitFixture, DotsMatchTheDequantisedDot) {
  const Fixture x = load(GetParam());
  const QuantType at = dot_activation_type(x.type);
  const int per_row = x.block_elems == 256 ? 8 : 64;  // 2048 elements
  const int64_t n = int64_t(per_row) * x.block_elems;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t len = static_cast<size_t>(n);
  std::vector<float> xa(len), wf(len), af(len);
  std::vector<uint8_t> a(row_bytes(at, n));
  for (int r = 0; r + per_row <= x.n_blocks; r += per_row) {
    const uint8_t* w = x.blocks.data() + size_t(r) * x.block_bytes;
    for (float& v : xa) v = nd(rng);
    quantize_row(at, xa.data(), a.data(), n);
    dequantize_row(x.type, w, wf.data(), n);
    dequantize_row(at, a.data(), af.data(), n);
    double exact = 0, wmax = 0, mag = 0;
    for (float v : wf) wmax = std::max(wmax, double(std::fabs(v)));
    for (int64_t i = 0; i < n; ++i) {
      exact += double(wf[size_t(i)]) * af[size_t(i)];
      mag += (std::fabs(wf[size_t(i)]) + wmax) * std::fabs(af[size_t(i)]);
    }
    const float want = quant::scalar_kernels().vec_dot(x.type)(n, w, a.data());
    EXPECT_NEAR(want, exact, 1e-5 * mag) << GetParam() << " rows from block " << r;
    for (const QuantKernelVariant& v : quant_kernel_variants()) {
      if (!v.supported) continue;
      const float got = v.kernels->vec_dot(x.type)(n, w, a.data());
      ASSERT_EQ(std::memcmp(&got, &want, 4), 0)
          << GetParam() << " " << v.kernels->isa << " rows from block " << r << ": " << got
          << " vs " << want;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Llamacpp, LowbitFixture,
                         ::testing::Values("q2_k", "q3_k", "iq4_xs", "iq4_nl"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace fak
