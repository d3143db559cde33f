// Quantized block formats: sizes and names, quantize -> dequantize error per type, dot products
// against the dequantized values, and every SIMD variant against the scalar reference.
#include "quant/quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/quant_blocks.h"

namespace fak {
namespace {

std::vector<float> gaussian(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<uint8_t> quantize(QuantType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(row_bytes(t, int64_t(x.size())));
  quantize_row(t, x.data(), q.data(), int64_t(x.size()));
  return q;
}

std::vector<float> dequantize(QuantType t, const void* q, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(t, q, y.data(), n);
  return y;
}

double relative_rmse(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += double(x[i] - y[i]) * (x[i] - y[i]);
    ref += double(x[i]) * x[i];
  }
  return std::sqrt(err / ref);
}

TEST(QuantTypes, SizesNamesAndIds) {
  struct Expect {
    QuantType t;
    const char* name;
    uint32_t ggml_id;
    int block;
    size_t bytes;
  };
  // Q8_K is fak's activation block, not ggml's 292-byte one: it also carries the 8 sums of 32.
  const Expect expect[] = {
      {QuantType::Q4_0, "q4_0", 2, 32, 18},      {QuantType::Q4_1, "q4_1", 3, 32, 20},
      {QuantType::Q5_0, "q5_0", 6, 32, 22},      {QuantType::Q5_1, "q5_1", 7, 32, 24},
      {QuantType::Q8_0, "q8_0", 8, 32, 34},      {QuantType::Q4_K, "q4_k", 12, 256, 144},
      {QuantType::Q5_K, "q5_k", 13, 256, 176},   {QuantType::Q6_K, "q6_k", 14, 256, 210},
      {QuantType::Q8_K, "q8_k", 15, 256, 308},   {QuantType::MXFP4, "mxfp4", 39, 32, 17},
      {QuantType::Q2_K, "q2_k", 10, 256, 84},    {QuantType::Q3_K, "q3_k", 11, 256, 110},
      {QuantType::IQ4_NL, "iq4_nl", 20, 32, 18}, {QuantType::IQ4_XS, "iq4_xs", 23, 256, 136},
  };
  ASSERT_EQ(all_quant_types().size(), std::size(expect));
  for (const Expect& e : expect) {
    EXPECT_EQ(quant_type_name(e.t), e.name);
    EXPECT_EQ(uint32_t(e.t), e.ggml_id);
    EXPECT_EQ(quant_type_from_ggml(e.ggml_id), e.t);
    EXPECT_EQ(quant_type_from_name(e.name), e.t);
    EXPECT_EQ(quant_block_size(e.t), e.block);
    EXPECT_EQ(quant_block_bytes(e.t), e.bytes);
    EXPECT_EQ(row_bytes(e.t, 4096), 4096 / e.block * e.bytes);
    EXPECT_THROW(row_bytes(e.t, e.block + 1), Error);
  }
  EXPECT_EQ(quant_type_from_name("Q4_K"), QuantType::Q4_K);
  EXPECT_FALSE(quant_type_from_name("iq2_xxs"));
  EXPECT_FALSE(quant_type_from_ggml(0));   // f32 is no quant type
  EXPECT_FALSE(quant_type_from_ggml(16));  // iq2_xxs: not implemented
  EXPECT_EQ(dot_activation_type(QuantType::Q4_0), QuantType::Q8_0);
  EXPECT_EQ(dot_activation_type(QuantType::Q6_K), QuantType::Q8_K);
}

// Relative RMSE (rms(x - dq(q(x))) / rms(x)) on N(0, 1) data, 64 Ki values. Measured values are in
// the comments; bounds leave ~15% headroom. The ordering follows bits per weight, as in llama.cpp's
// quantize-stats: q8 << q6_K < q5 < q4 < q3_K < q2_K.
struct RmseCase {
  QuantType t;
  double max_rmse;
};
const RmseCase kRmse[] = {
    {QuantType::Q8_0, 0.0062},    // measured 0.0054
    {QuantType::Q8_K, 0.0080},    // 0.0069: one scale per 256 values
    {QuantType::Q6_K, 0.0205},    // 0.0178
    {QuantType::Q5_0, 0.0490},    // 0.0427
    {QuantType::Q5_1, 0.0435},    // 0.0378
    {QuantType::Q5_K, 0.0410},    // 0.0358
    {QuantType::Q4_0, 0.0990},    // 0.0859
    {QuantType::Q4_1, 0.0900},    // 0.0780
    {QuantType::Q4_K, 0.0820},    // 0.0712
    {QuantType::MXFP4, 0.1300},   // 0.1144: 8 magnitudes, a power-of-two scale
    {QuantType::Q3_K, 0.1750},    // 0.1508: 8 levels per 16 values
    {QuantType::Q2_K, 0.3400},    // 0.2957: 4 levels (llama.cpp's own quantiser's bytes)
    {QuantType::IQ4_NL, 0.0875},  // 0.0760: 16 non-uniform levels
    {QuantType::IQ4_XS, 0.0880},  // 0.0766
};

TEST(QuantRoundTrip, RelativeRmseOnGaussianData) {
  const int64_t n = 65536;
  const std::vector<float> x = gaussian(n, 1);
  for (const RmseCase& c : kRmse) {
    const auto q = quantize(c.t, x);
    const double rmse = relative_rmse(x, dequantize(c.t, q.data(), n));
    std::printf("  %-5s relative rmse %.4f (bound %.4f)\n",
                std::string(quant_type_name(c.t)).c_str(), rmse, c.max_rmse);
    EXPECT_LT(rmse, c.max_rmse) << quant_type_name(c.t);
  }
}

// Rows with an outlier (one value of 40 sigma: stretches one block's scale; worst for q8_K's
// single scale per 256, measured 0.020) stay within 3x the Gaussian bound, all-positive rows (which
// the min/offset formats exploit) within 2x; zero rows come back exactly zero, not NaN.
TEST(QuantRoundTrip, OutliersShiftedAndZeroRows) {
  const int64_t n = 4096;
  std::vector<float> outlier = gaussian(n, 2);
  outlier[100] = 40.0f;
  std::vector<float> shifted = gaussian(n, 3);
  for (float& v : shifted) v = std::fabs(v) + 0.5f;
  const std::vector<float> zeros(size_t(n), 0.0f);
  for (const RmseCase& c : kRmse) {
    const auto name = quant_type_name(c.t);
    const double e_out = relative_rmse(outlier, dequantize(c.t, quantize(c.t, outlier).data(), n));
    const double e_shift =
        relative_rmse(shifted, dequantize(c.t, quantize(c.t, shifted).data(), n));
    std::printf("  %-5s outlier %.4f shifted %.4f\n", std::string(name).c_str(), e_out, e_shift);
    EXPECT_LT(e_out, 3 * c.max_rmse) << name;
    EXPECT_LT(e_shift, 2 * c.max_rmse) << name;
    for (float v : dequantize(c.t, quantize(c.t, zeros).data(), n)) ASSERT_EQ(v, 0.0f) << name;
  }
}

// MXFP4 as ggml writes it: bytes from ggml_quantize_chunk(GGML_TYPE_MXFP4) (llama.cpp d32676d77)
// on these inputs (blocks of magnitude 1, 0.013, 250 and 3e-6, a zero, a tripled element), and
// its dequantised values.
TEST(QuantLayout, Mxfp4BytesAreGgmls) {
  std::vector<float> x(128);
  for (int i = 0; i < 128; ++i) {
    const float scale = i < 32 ? 1.0f : i < 64 ? 0.013f : i < 96 ? 250.0f : 3e-6f;
    x[size_t(i)] =
        scale * std::sin(0.37f * float(i) + 0.1f) * (1.0f + 0.5f * std::cos(1.3f * float(i)));
  }
  x[40] = 0.0f;
  x[70] = -x[70] * 3.0f;
  const uint8_t ggml[68] = {0x7d, 0xa1, 0x04, 0x33, 0x64, 0x66, 0x57, 0x45, 0x52, 0x50, 0x1b, 0x9e,
                            0xbd, 0xec, 0xfd, 0xee, 0xcd, 0x77, 0xea, 0xda, 0x91, 0x03, 0x33, 0x64,
                            0x66, 0x46, 0x40, 0x51, 0x40, 0x0b, 0x9d, 0xbc, 0xeb, 0xed, 0x85, 0xce,
                            0xeb, 0xeb, 0xda, 0x91, 0x13, 0x4e, 0x65, 0x67, 0x47, 0x44, 0x52, 0x40,
                            0x0c, 0x9d, 0xcc, 0x6b, 0xce, 0xce, 0xcd, 0xdb, 0xeb, 0xca, 0x91, 0x13,
                            0x42, 0x65, 0x56, 0x36, 0x43, 0x51, 0x40, 0x0b};
  const auto q = quantize(QuantType::MXFP4, x);
  ASSERT_EQ(q.size(), sizeof ggml);
  EXPECT_EQ(0, std::memcmp(q.data(), ggml, sizeof ggml));
  const auto y = dequantize(QuantType::MXFP4, ggml, 128);
  EXPECT_EQ(y[0], 0.125f);
  EXPECT_EQ(y[33], -0.00390625f);
  EXPECT_EQ(y[70], -256.0f);
  EXPECT_EQ(y[100], -1.43051147e-06f);
}

// Hand-built blocks pin the bit layouts that llama.cpp reads.
TEST(QuantLayout, HandBuiltBlocksDequantizeAsGgml) {
  {  // q4_0: element j in the low nibble of qs[j], element j+16 in the high nibble.
    quant::BlockQ4_0 b{};
    b.d = f32_to_f16(0.5f);
    for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | ((15 - j) << 4));
    const auto y = dequantize(QuantType::Q4_0, &b, 32);
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[j], 0.5f * (j - 8));
      EXPECT_EQ(y[j + 16], 0.5f * (15 - j - 8));
    }
  }
  {  // q5_0: the 5th bit of element j is bit j of qh.
    quant::BlockQ5_0 b{};
    b.d = f32_to_f16(1.0f);
    const uint32_t qh = 0x80000001u;  // elements 0 and 31
    std::memcpy(b.qh, &qh, 4);
    const auto y = dequantize(QuantType::Q5_0, &b, 32);
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_EQ(y[1], -16.0f);
    EXPECT_EQ(y[31], 0.0f);
  }
  {  // q4_K: sub-block 5 takes its scale from bytes 9 (low 4 bits) and 1 (top 2 bits).
    quant::BlockQ4K b{};
    b.d = f32_to_f16(1.0f);
    b.dmin = f32_to_f16(1.0f);
    b.scales[9] = 0x23;      // scale 5 low bits 3, min 5 low bits 2
    b.scales[1] = 0x40;      // scale 5 high bits 1 -> scale 19
    b.scales[5] = 0x80 | 7;  // min 1 = 7, min 5 high bits 2 -> min 34
    // Chunk 2 (elements 128..255) is qs[64..95]: low nibbles sub-block 4, high sub-block 5.
    for (int l = 0; l < 32; ++l) b.qs[64 + l] = 0x21;
    const auto y = dequantize(QuantType::Q4_K, &b, 256);
    EXPECT_EQ(y[32], -7.0f);               // sub-block 1: code 0, scale 0, min 7
    EXPECT_EQ(y[128], 0.0f);               // sub-block 4: code 1, scale 0, min 0
    EXPECT_EQ(y[160], 19.0f * 2 - 34.0f);  // sub-block 5: code 2
  }
  {  // q6_K: element 64+l of a half uses the high nibble of ql[l] and bits 4-5 of qh[l].
    quant::BlockQ6K b{};
    b.d = f32_to_f16(1.0f);
    for (int k = 0; k < 16; ++k) b.scales[k] = int8_t(k + 1);
    b.ql[0] = 0xF0;  // element 64: low 4 bits 15; element 0: 0
    b.qh[0] = 0x30;  // element 64: high bits 3 -> code 63
    const auto y = dequantize(QuantType::Q6_K, &b, 256);
    EXPECT_EQ(y[0], 1.0f * (0 - 32));
    EXPECT_EQ(y[64], 5.0f * (63 - 32));  // sub-block 4
    EXPECT_EQ(y[255], 16.0f * (0 - 32));
  }
}

// The scalar dot equals the float dot of the dequantized rows: both sides multiply the same
// integers by the same block scales, so only float rounding of a few thousand terms separates
// them (bound 1e-5 of Σ|w a|, ~20x the measured worst case).
TEST(QuantDot, ScalarDotMatchesDequantizedDot) {
  for (QuantType t : all_quant_types()) {
    const int64_t n = 4096;
    const QuantType at = dot_activation_type(t);
    const auto w = quantize(t, gaussian(n, 10));
    const auto a = quantize(at, gaussian(n, 11));
    const auto wf = dequantize(t, w.data(), n);
    const auto af = dequantize(at, a.data(), n);
    double exact = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      exact += double(wf[i]) * af[i];
      mag += std::fabs(double(wf[i]) * af[i]);
    }
    const float got = quant::scalar_kernels().vec_dot(t)(n, w.data(), a.data());
    EXPECT_NEAR(got, exact, 1e-5 * mag) << quant_type_name(t);
  }
}

// Copies bytes to an address `misalign` bytes past a 64-byte boundary.
struct Misaligned {
  std::vector<uint8_t> storage;
  uint8_t* p;
  Misaligned(const std::vector<uint8_t>& bytes, int misalign) : storage(bytes.size() + 128) {
    auto base = reinterpret_cast<uintptr_t>(storage.data());
    p = storage.data() + ((64 - base % 64) % 64) + misalign;
    std::memcpy(p, bytes.data(), bytes.size());
  }
};

class QuantVariant : public ::testing::TestWithParam<size_t> {
 protected:
  const QuantKernels& kernels() { return *quant_kernel_variants()[GetParam()].kernels; }
  void SetUp() override {
    const QuantKernelVariant& v = quant_kernel_variants()[GetParam()];
    if (!v.supported) GTEST_SKIP() << "skipped: this CPU lacks " << v.kernels->isa;
  }
};

std::vector<int64_t> lengths_for(QuantType t) {
  if (quant_block_size(t) == 32) return {32, 64, 96, 32 * 7, 32 * 33, 4096};
  return {256, 512, 768, 256 * 5, 4096, 256 * 17};
}

// Integer parts are exact in every variant; they differ only in float summation order (8 lanes +
// a horizontal add, per-block products formed in another order), a few ulp per block:
// tolerance 1e-5 of Σ(|w| + max|w|)|a|, which bounds every term (mins included) that is summed.
TEST_P(QuantVariant, DotsMatchScalarReference) {
  const QuantKernels& ref = quant::scalar_kernels();
  const QuantKernels& k = kernels();
  uint32_t seed = 100;
  for (QuantType t : all_quant_types()) {
    const QuantType at = dot_activation_type(t);
    for (int64_t n : lengths_for(t)) {
      std::vector<float> wx = gaussian(n, seed++);
      wx[size_t(seed % n)] *= 8;  // an outlier exercises large scales
      const auto w = quantize(t, wx);
      const auto a = quantize(at, gaussian(n, seed++));
      const auto wf = dequantize(t, w.data(), n);
      const auto af = dequantize(at, a.data(), n);
      double wmax = 0, mag = 0;
      for (float v : wf) wmax = std::max(wmax, double(std::fabs(v)));
      for (int64_t i = 0; i < n; ++i) mag += (std::fabs(wf[i]) + wmax) * std::fabs(af[i]);
      const float want = ref.vec_dot(t)(n, w.data(), a.data());
      for (int mis = 0; mis < 4; ++mis) {
        Misaligned mw(w, mis), ma(a, 3 - mis);
        const float got = k.vec_dot(t)(n, mw.p, ma.p);
        ASSERT_NEAR(got, want, 1e-5 * mag)
            << k.isa << " " << quant_type_name(t) << " n=" << n << " misalign=" << mis;
      }
    }
  }
}

// The block-serial types (dot_ref.cpp) are specified down to the float operations, so every variant
// must give the scalar reference's exact bits, not just a close value: that is what lets the
// multi-row matmul kernels, which follow the same rule lane by lane, agree with vec_dot and the
// scalar fallback agree with SIMD machines.
TEST_P(QuantVariant, BlockSerialDotsMatchScalarBits) {
  const QuantKernels& ref = quant::scalar_kernels();
  const QuantKernels& k = kernels();
  uint32_t seed = 500;
  for (QuantType t :
       {QuantType::Q8_0, QuantType::Q4_0, QuantType::Q5_0, QuantType::Q4_K, QuantType::Q5_K,
        QuantType::Q6_K, QuantType::Q2_K, QuantType::Q3_K, QuantType::IQ4_NL, QuantType::IQ4_XS}) {
    const QuantType at = dot_activation_type(t);
    for (int64_t n : lengths_for(t)) {
      std::vector<float> wx = gaussian(n, seed++);
      wx[size_t(seed % n)] *= 8;
      const auto w = quantize(t, wx);
      const auto a = quantize(at, gaussian(n, seed++));
      const float want = ref.vec_dot(t)(n, w.data(), a.data());
      for (int mis = 0; mis < 4; ++mis) {
        Misaligned mw(w, mis), ma(a, 3 - mis);
        const float got = k.vec_dot(t)(n, mw.p, ma.p);
        ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
            << k.isa << " " << quant_type_name(t) << " n=" << n << " misalign=" << mis;
      }
    }
  }
}

// Activation quantizers must give the reference's exact bytes (same max, scale, rounding).
TEST_P(QuantVariant, ActivationQuantizersMatchScalarBytes) {
  const QuantKernels& ref = quant::scalar_kernels();
  const QuantKernels& k = kernels();
  for (QuantType at : {QuantType::Q8_0, QuantType::Q8_K}) {
    for (int64_t n : lengths_for(at)) {
      std::vector<float> x = gaussian(n, uint32_t(n));
      for (int64_t i = 0; i < std::min<int64_t>(n, 32); ++i) x[size_t(i)] = 0;  // a zero block
      // A block so small that 1 / d is infinite (its quants +-127, its zeros 0), where there are
      // blocks enough.
      if (n >= 3 * quant_block_size(at))
        for (int64_t i = quant_block_size(at); i < 2 * quant_block_size(at); ++i)
          x[size_t(i)] = i % 5 == 0 ? 0.0f : 1e-38f * x[size_t(i)];
      std::vector<uint8_t> want(row_bytes(at, n)), got(want.size() + 8);
      ref.quantize_act(at)(x.data(), want.data(), n);
      for (int mis = 0; mis < 4; ++mis) {
        std::vector<float> xs(x.size() + 1);
        std::memcpy(xs.data() + (mis & 1), x.data(), x.size() * 4);  // 4-byte-only aligned input
        k.quantize_act(at)(xs.data() + (mis & 1), got.data() + mis, n);
        ASSERT_EQ(0, std::memcmp(want.data(), got.data() + mis, want.size()))
            << k.isa << " " << quant_type_name(at) << " n=" << n << " misalign=" << mis;
      }
    }
  }
}

// The K-quant sub-block fits (the searches of a weight conversion) must give the reference's
// exact codes, scales and mins (q6_K: scales), so a conversion writes the same file on every CPU:
// gaussian super-blocks with outliers, one-signed, constant, zero and signed-zero ones, tiny and
// huge magnitudes.
TEST_P(QuantVariant, WeightFitsMatchScalarBits) {
  const QuantKernels& ref = quant::scalar_kernels();
  const QuantKernels& k = kernels();
  std::mt19937 rng(77);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 255);
  for (int trial = 0; trial < 600; ++trial) {
    float x[256];
    const float mag = std::ldexp(1.0f, trial % 60 - 40);  // 2^-40 .. 2^19
    for (float& v : x) v = nd(rng) * mag;
    switch (trial % 6) {
      case 1:
        for (float& v : x) v = std::fabs(v);  // one-signed: the min clips to 0
        break;
      case 2:
        for (float& v : x) v = -std::fabs(v);
        break;
      case 3:
        for (int j = 0; j < 256; j += 64) std::fill(x + j, x + j + 32, 0.5f * mag);  // constant
        break;
      case 4:
        for (int j = 0; j < 256; j += 96) std::fill(x + j, x + j + 32, j % 192 ? -0.0f : 0.0f);
        break;
      case 5:
        x[pick(rng)] *= 64;  // an outlier
        break;
    }
    float want_q6[16], got_q6[16];
    ref.fit_q6_k(x, want_q6);
    k.fit_q6_k(x, got_q6);
    ASSERT_EQ(0, std::memcmp(want_q6, got_q6, sizeof want_q6)) << "q6_K trial " << trial;
    for (int nmax : {15, 31}) {
      uint8_t want_q[256], got_q[256];
      float want_s[8], want_m[8], got_s[8], got_m[8];
      ref.fit_k4(x, nmax, want_q, want_s, want_m);
      k.fit_k4(x, nmax, got_q, got_s, got_m);
      ASSERT_EQ(0, std::memcmp(want_q, got_q, sizeof want_q)) << "trial " << trial;
      ASSERT_EQ(0, std::memcmp(want_s, got_s, sizeof want_s)) << "trial " << trial;
      ASSERT_EQ(0, std::memcmp(want_m, got_m, sizeof want_m)) << "trial " << trial;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Quant, QuantVariant,
                         ::testing::Range(size_t(1), quant_kernel_variants().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return std::string(quant_kernel_variants()[info.param].kernels->isa);
                         });

TEST(QuantDispatch, PicksBestSupportedVariant) {
  const QuantKernels& k = quant_kernels();
  bool found = false;
  for (const QuantKernelVariant& v : quant_kernel_variants()) {
    if (v.kernels == &k) found = v.supported;
  }
  EXPECT_TRUE(found);
  std::printf("  dispatch chose %s\n", std::string(k.isa).c_str());
  for (QuantType t : all_quant_types()) EXPECT_NE(k.vec_dot(t), nullptr);
}

}  // namespace
}  // namespace fak
