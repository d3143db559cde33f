// The delta rule's recurrent step (ops/deltanet_step.h): the AVX2 and AVX-512 kernels give the
// scalar reference's bits over awkward sizes (tails of every width, strips of every count) and
// token counts, and running n tokens in one call equals running them one call each: the property
// the whole reuse stack rests on for hybrid models.
#include "ops/deltanet.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "memory/recurrent_state.h"
#include "ops/deltanet_step.h"
#include "ops/matmul_kernels.h"
#include "test_util.h"

namespace fak {
namespace {

struct Inputs {
  int dk, dv, n;
  std::vector<float> q, k, v, beta, g, S;
  Inputs(int dk_, int dv_, int n_, uint32_t seed) : dk(dk_), dv(dv_), n(n_) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> ud(0.0f, 1.0f);
    auto fill = [&](std::vector<float>& x, size_t size) {
      x.resize(size);
      for (float& y : x) y = nd(rng);
    };
    fill(q, size_t(n) * size_t(dk));
    fill(k, size_t(n) * size_t(dk));
    fill(v, size_t(n) * size_t(dv));
    fill(S, size_t(dk) * size_t(dv));
    beta.resize(size_t(n));
    g.resize(size_t(n));
    for (int t = 0; t < n; ++t) {
      beta[size_t(t)] = ud(rng);
      g[size_t(t)] = -2.0f * ud(rng);  // a decay in (e^-2, 1]
    }
  }
};

// v rows have their own stride in Inputs; the kernels take one stride for q, k and v, so pack them
// like the forward does: [n][dk | dk | dv].
struct Packed {
  std::vector<float> qkv;
  size_t stride;
  explicit Packed(const Inputs& in) : stride(size_t(2 * in.dk + in.dv)) {
    qkv.resize(size_t(in.n) * stride);
    for (int t = 0; t < in.n; ++t) {
      float* row = &qkv[size_t(t) * stride];
      std::memcpy(row, &in.q[size_t(t) * size_t(in.dk)], sizeof(float) * size_t(in.dk));
      std::memcpy(row + in.dk, &in.k[size_t(t) * size_t(in.dk)], sizeof(float) * size_t(in.dk));
      std::memcpy(row + 2 * in.dk, &in.v[size_t(t) * size_t(in.dv)], sizeof(float) * size_t(in.dv));
    }
  }
  DeltaHeadRows rows(const Inputs& in, int t0, float* out) const {
    const float* r = &qkv[size_t(t0) * stride];
    return {r, r + in.dk, r + 2 * in.dk, stride, in.beta.data() + t0, in.g.data() + t0,
            1, out,       size_t(in.dv)};
  }
};

// S and every output after running the n tokens through fn in calls of `call` tokens.
std::vector<float> run(DeltaStepFn fn, const Inputs& in, int call) {
  const Packed p(in);
  std::vector<float> S = in.S, out(size_t(in.n) * size_t(in.dv));
  for (int t0 = 0; t0 < in.n; t0 += call)
    fn(S.data(), in.dk, in.dv, p.rows(in, t0, &out[size_t(t0) * size_t(in.dv)]),
       std::min(call, in.n - t0));
  S.insert(S.end(), out.begin(), out.end());
  return S;
}

TEST(DeltaStep, VectorKernelsGiveTheReferenceBits) {
  std::vector<std::pair<const char*, DeltaStepFn>> kernels;
  if (kernels::cpu_has_avx2()) kernels.push_back({"avx2", delta_step_avx2()});
  if (kernels::cpu_has_avx512()) kernels.push_back({"avx512", delta_step_avx512()});
  if (kernels.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512 VNNI";
  int checked = 0;
  for (int dk : {1, 3, 16, 128})
    for (int dv : {1, 7, 8, 15, 16, 17, 33, 64, 65, 128, 131})
      for (int n : {1, 2, 5}) {
        const Inputs in(dk, dv, n, uint32_t(dk * 1000 + dv * 10 + n));
        const std::vector<float> want = run(delta_step_ref, in, n);
        for (const auto& [name, fn] : kernels) {
          ASSERT_TRUE(test::bit_equal(run(fn, in, n), want))
              << name << " dk " << dk << " dv " << dv << " n " << n;
          ++checked;
        }
      }
  EXPECT_GT(checked, 100);
}

TEST(DeltaStep, CallBoundariesChangeNoBit) {
  const Inputs in(32, 48, 13, 7);
  const std::vector<float> whole = run(delta_step_kernel(), in, 13);
  for (int call : {1, 2, 3, 5, 12}) {
    EXPECT_TRUE(test::bit_equal(run(delta_step_kernel(), in, call), whole)) << "calls of " << call;
    EXPECT_TRUE(test::bit_equal(run(delta_step_ref, in, call), run(delta_step_ref, in, 13)))
        << "reference, calls of " << call;
  }
}

// The recurrence itself, in double: o_t = S_t^T q_t with S_t = e^g S + k (beta (v - (e^g S)^T
// k))^T.
TEST(DeltaStep, ComputesTheGatedDeltaRule) {
  const Inputs in(8, 5, 4, 3);
  const std::vector<float> got = run(delta_step_ref, in, 4);
  std::vector<double> S(in.S.begin(), in.S.end());
  for (int t = 0; t < in.n; ++t) {
    const double decay = std::exp(double(in.g[size_t(t)]));
    for (double& x : S) x *= decay;
    for (int d = 0; d < in.dv; ++d) {
      double kv = 0;
      for (int i = 0; i < in.dk; ++i) kv += S[size_t(i * in.dv + d)] * in.k[size_t(t * in.dk + i)];
      const double delta = in.beta[size_t(t)] * (in.v[size_t(t * in.dv + d)] - kv);
      double o = 0;
      for (int i = 0; i < in.dk; ++i) {
        S[size_t(i * in.dv + d)] += in.k[size_t(t * in.dk + i)] * delta;
        o += S[size_t(i * in.dv + d)] * in.q[size_t(t * in.dk + i)];
      }
      EXPECT_NEAR(got[S.size() + size_t(t * in.dv + d)], o, 1e-5) << "t " << t << " d " << d;
    }
  }
  for (size_t i = 0; i < S.size(); ++i) EXPECT_NEAR(got[i], S[i], 1e-5) << i;
}

// Value heads in llama.cpp's tiled order (DeltaNetParams::tiled_v_heads, a K-quant GGUF's layers):
// every value-head input moved to that order gives the grouped order's outputs and states moved
// the same way, bit for bit, over two calls: tiled head t is grouped head (t % nk) * group + t /
// nk, and reads key head t % nk.
TEST(DeltaNetCore, TiledValueHeadsAreTheGroupedHeadsMoved) {
  const int nk = 2, nv = 6, dk = 8, dv = 4, kernel = 4, group = nv / nk;
  const int key_dim = nk * dk, value_dim = nv * dv, conv_dim = 2 * key_dim + value_dim;
  const auto grouped_at = [&](int t) { return (t % nk) * group + t / nk; };
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = nd(rng);
    return v;
  };
  // Rows of `width` floats: the value heads' runs of dv rows from `offset` (per token of `tokens`
  // blocks of `block` rows) moved to the tiled order.
  auto tiled = [&](const std::vector<float>& v, int tokens, int block, int offset, int per_head,
                   int width) {
    std::vector<float> out = v;
    for (int tok = 0; tok < tokens; ++tok)
      for (int t = 0; t < nv; ++t)
        std::memcpy(&out[size_t((tok * block + offset + t * per_head) * width)],
                    &v[size_t((tok * block + offset + grouped_at(t) * per_head) * width)],
                    sizeof(float) * size_t(per_head * width));
    return out;
  };
  const std::vector<float> conv = random(size_t(conv_dim * kernel)), dt_bias = random(nv);
  std::vector<float> ssm_a = random(nv);
  for (float& x : ssm_a) x = -std::fabs(x);
  const std::vector<float> conv_t = tiled(conv, 1, conv_dim, 2 * key_dim, dv, kernel),
                           ssm_a_t = tiled(ssm_a, 1, nv, 0, 1, 1),
                           dt_t = tiled(dt_bias, 1, nv, 0, 1, 1);
  const DeltaNetParams grouped{nk, nv, dk, dv, kernel, &conv, &ssm_a, &dt_bias};
  const DeltaNetParams tiles{nk, nv, dk, dv, kernel, &conv_t, &ssm_a_t, &dt_t, true};
  const RecurrentShape shape{{true}, size_t(conv_dim * (kernel - 1)), size_t(nv * dk * dv)};
  RecurrentState sg(shape), st(shape);
  for (int T : {5, 3}) {
    const std::vector<float> qkv = random(size_t(T * conv_dim)), b = random(size_t(T * nv)),
                             a = random(size_t(T * nv));
    std::vector<float> sc(size_t(T * conv_dim)), sb(size_t(T * nv)), sg_(size_t(T * nv));
    const DeltaNetScratch scratch{sc.data(), sb.data(), sg_.data()};
    std::vector<float> core_g(size_t(T * value_dim)), core_t(core_g.size());
    DeltaNetSequence qg{&sg, T}, qt{&st, T};
    deltanet_core(grouped, 0, {&qg, 1}, qkv.data(), b.data(), a.data(), scratch, core_g.data());
    const auto qkv_t = tiled(qkv, T, conv_dim, 2 * key_dim, dv, 1);
    const auto b_t = tiled(b, T, nv, 0, 1, 1), a_t = tiled(a, T, nv, 0, 1, 1);
    deltanet_core(tiles, 0, {&qt, 1}, qkv_t.data(), b_t.data(), a_t.data(), scratch, core_t.data());
    ASSERT_EQ(0, std::memcmp(tiled(core_g, T, value_dim, 0, dv, 1).data(), core_t.data(),
                             sizeof(float) * core_t.size()))
        << "call of " << T;
    const std::vector<float> ssm_g(sg.ssm(0), sg.ssm(0) + nv * dk * dv),
        ssm_t(st.ssm(0), st.ssm(0) + nv * dk * dv);
    ASSERT_EQ(0, std::memcmp(tiled(ssm_g, 1, nv, 0, 1, dk * dv).data(), ssm_t.data(),
                             sizeof(float) * ssm_t.size()));
    const std::vector<float> cs_g(sg.conv(0), sg.conv(0) + conv_dim * (kernel - 1)),
        cs_t(st.conv(0), st.conv(0) + conv_dim * (kernel - 1));
    ASSERT_EQ(0, std::memcmp(tiled(cs_g, 1, conv_dim, 2 * key_dim, dv, kernel - 1).data(),
                             cs_t.data(), sizeof(float) * cs_t.size()));
  }
}

}  // namespace
}  // namespace fak
