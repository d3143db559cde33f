// The element-wise kernels of the forward pass: exp_poly against libm, and the vectorised SiLU
// against its scalar form, bit for bit (the forward pass must give the same bits on every ISA).
#include "ops/vec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ops/matmul_kernels.h"
#include "ops/ops.h"

namespace fak {
namespace {

TEST(Vec, ExpPolyAgreesWithLibm) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
    const double want = std::exp(double(x));
    worst = std::max(worst, std::fabs(double(exp_poly(x)) - want) / want);
  }
  EXPECT_LT(worst, 4e-7);
  EXPECT_EQ(exp_poly(0.0f), 1.0f);
  EXPECT_EQ(exp_poly(-100.0f), 0.0f);             // below the range: exactly 0
  EXPECT_EQ(exp_poly(-INFINITY), 0.0f);           // how masked scores arrive
  EXPECT_TRUE(std::isfinite(exp_poly(1000.0f)));  // clamped, never inf
}

TEST(Vec, SiluMulSameBitsOnEveryKernelAndAgreesWithLibm) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  for (int n : {1, 7, 8, 9, 64, 1000, 40000}) {  // tails, and more than one threaded chunk
    std::vector<float> gate(static_cast<size_t>(n)), up(static_cast<size_t>(n));
    for (auto& x : gate) x = nd(rng);
    for (auto& x : up) x = nd(rng);
    gate[0] = -120.0f;  // exp(-g) clamped: silu ~ 0
    const size_t sz = static_cast<size_t>(n);
    std::vector<float> ref(sz), fast(sz), threaded(sz);
    vec_kernels_ref().silu_mul(gate.data(), up.data(), n, ref.data());
    vec_kernels().silu_mul(gate.data(), up.data(), n, fast.data());
    silu_mul(gate.data(), up.data(), n, threaded.data());
    ASSERT_EQ(0, std::memcmp(ref.data(), fast.data(), sizeof(float) * size_t(n))) << n;
    ASSERT_EQ(0, std::memcmp(ref.data(), threaded.data(), sizeof(float) * size_t(n))) << n;
    for (int i = 0; i < n; ++i) {
      const double g = gate[size_t(i)], want = g / (1.0 + std::exp(-g)) * up[size_t(i)];
      EXPECT_NEAR(ref[size_t(i)], want, 1e-6 * (1.0 + std::fabs(want))) << i;
    }
  }
  // In place, as the forward pass calls it.
  std::vector<float> g{-3.0f, -0.5f, 0.0f, 0.5f, 3.0f, 10.0f, -10.0f, 1.0f, 2.0f}, u(9, 2.0f);
  std::vector<float> want(9);
  vec_kernels_ref().silu_mul(g.data(), u.data(), 9, want.data());
  silu_mul(g.data(), u.data(), 9, g.data());
  EXPECT_EQ(0, std::memcmp(want.data(), g.data(), sizeof(float) * 9));
}

// GeGLU's tanh GELU as x sigma(2u) through exp_poly: every variant the same bits (the threaded
// op too, in place), and within 2e-6 of PyTorch's formula 0.5 x (1 + tanh(u)) in double.
TEST(Vec, GeluMulVariantsAgreeAndMatchTheTanhFormula) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int n : {1, 7, 8, 33, 4096 + 5}) {
    std::vector<float> gate(static_cast<size_t>(n)), up(static_cast<size_t>(n));
    for (auto& x : gate) x = nd(rng);
    for (auto& x : up) x = nd(rng);
    gate[0] = -60.0f;  // far in the tail: gelu ~ 0
    const size_t sz = static_cast<size_t>(n);
    std::vector<float> ref(sz), fast(sz), threaded(sz);
    vec_kernels_ref().gelu_mul(gate.data(), up.data(), n, ref.data());
    vec_kernels().gelu_mul(gate.data(), up.data(), n, fast.data());
    gelu_tanh_mul(gate.data(), up.data(), n, threaded.data());
    ASSERT_EQ(0, std::memcmp(ref.data(), fast.data(), sizeof(float) * sz)) << n;
    ASSERT_EQ(0, std::memcmp(ref.data(), threaded.data(), sizeof(float) * sz)) << n;
    for (int i = 0; i < n; ++i) {
      const double x = gate[size_t(i)];
      const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
      const double want = 0.5 * x * (1.0 + std::tanh(u)) * up[size_t(i)];
      EXPECT_NEAR(ref[size_t(i)], want, 2e-6 * (1.0 + std::fabs(want))) << i << " x " << x;
    }
  }
}

// n draws of nd, in order.
std::vector<float> normal_floats(size_t n, std::normal_distribution<float>& nd, std::mt19937& rng) {
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// gpt-oss's clamped SwiGLU through exp_poly: every variant the same bits (the threaded op too, in
// place), the clamps where transformers' GptOssExperts puts them, within 1e-6 of the formula in
// double, and a NaN passes through as std::min / std::clamp let it.
TEST(Vec, ClampedSwigluVariantsAgreeAndMatchTheFormula) {
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;  // gpt-oss-20b's config
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 5.0f);
  for (int n : {1, 7, 8, 33, 3 * 16 * 1024 + 5}) {
    const size_t sz = static_cast<size_t>(n);
    std::vector<float> gate = normal_floats(sz, nd, rng), up = normal_floats(sz, nd, rng);
    gate[0] = -100.0f;  // sigmoid past exp_poly's clamp: ~0
    if (n > 9) {
      gate[8] = std::nanf("");
      up[9] = std::nanf("");
    }
    std::vector<float> ref(sz), fast(sz), threaded = gate;
    vec_kernels_ref().clamped_swiglu_mul(gate.data(), up.data(), n, kAlpha, kLimit, ref.data());
    vec_kernels().clamped_swiglu_mul(gate.data(), up.data(), n, kAlpha, kLimit, fast.data());
    clamped_swiglu_mul(threaded.data(), up.data(), n, kAlpha, kLimit, threaded.data());
    ASSERT_EQ(0, std::memcmp(ref.data(), fast.data(), sizeof(float) * sz)) << n;
    ASSERT_EQ(0, std::memcmp(ref.data(), threaded.data(), sizeof(float) * sz)) << n;
    for (int i = 0; i < n; ++i) {
      if (n > 9 && (i == 8 || i == 9)) {
        EXPECT_TRUE(std::isnan(ref[size_t(i)])) << i;
        continue;
      }
      const double g = std::min(double(gate[size_t(i)]), double(kLimit));
      const double u = std::clamp(double(up[size_t(i)]), -double(kLimit), double(kLimit));
      const double want = (u + 1.0) * g / (1.0 + std::exp(-double(kAlpha) * g));
      EXPECT_NEAR(ref[size_t(i)], want, 1e-6 * (1.0 + std::fabs(want))) << i;
    }
  }
}

// The gated attention's x * sigmoid(gate) through exp_poly: every variant the same bits (the
// threaded op over several chunks too), within 1e-6 of the formula in double.
TEST(Vec, SigmoidMulVariantsAgreeAndMatchTheFormula) {
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  for (int n : {1, 7, 8, 33, 3 * 16 * 1024 + 5}) {
    const size_t sz = static_cast<size_t>(n);
    std::vector<float> gate = normal_floats(sz, nd, rng), x = normal_floats(sz, nd, rng);
    gate[0] = -100.0f;  // past exp_poly's clamp (88.37): sigmoid ~4e-39 for 4e-44, as good as 0
    std::vector<float> ref = x, fast = x, threaded = x;
    vec_kernels_ref().sigmoid_mul(ref.data(), gate.data(), n);
    vec_kernels().sigmoid_mul(fast.data(), gate.data(), n);
    sigmoid_mul(threaded.data(), gate.data(), n);
    ASSERT_EQ(0, std::memcmp(ref.data(), fast.data(), sizeof(float) * sz)) << n;
    ASSERT_EQ(0, std::memcmp(ref.data(), threaded.data(), sizeof(float) * sz)) << n;
    EXPECT_LT(std::fabs(ref[0]), 1e-37f);
    for (size_t i = 0; i < sz; ++i) {
      const double want = double(x[i]) / (1.0 + std::exp(-double(gate[i])));
      EXPECT_NEAR(ref[i], want, 1e-6 * (1.0 + std::fabs(want))) << i;
    }
  }
}

// RMSNorm's sum of squares: the same bits on every kernel (tails of every length past the 16
// lanes), within a few ulps of a long double sum; and rmsnorm scales by it as HF's formula says.
TEST(Vec, SumSquaresSameBitsOnEveryKernel) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int n : {1, 5, 15, 16, 17, 31, 64, 896, 2048 + 13, 5120}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = nd(rng);
    x[0] = 3e5f;  // a large first element: its lane's sum rounds
    const double ref = vec_kernels_ref().sum_squares(x.data(), n);
    const double fast = vec_kernels().sum_squares(x.data(), n);
    ASSERT_EQ(0, std::memcmp(&ref, &fast, sizeof ref)) << n;
    long double want = 0;
    for (float v : x) want += (long double)v * v;
    EXPECT_NEAR(ref, double(want), 1e-14 * double(want)) << n;
    std::vector<float> w(x.size(), 0.5f), out(x.size());
    rmsnorm(x.data(), w.data(), n, 1e-6f, out.data());
    const float scale = float(1.0 / std::sqrt(double(want) / n + 1e-6));
    for (int i = 0; i < n; ++i)
      EXPECT_NEAR(out[size_t(i)], x[size_t(i)] * scale * 0.5f, 1e-6f * std::fabs(x[size_t(i)]))
          << i;
  }
}

}  // namespace
}  // namespace fak
