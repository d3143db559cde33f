// Mixture-of-experts models beyond the HF parity fixtures (parity_test.cpp) and the reuse suite
// (session_test.cpp, which runs on the MoE fixtures too): the routing and expert ops against a
// float64 reference, quantised experts computed as stored and batch-invariant, norm_topk_prob
// false, dense layers between sparse ones, multimodal checkpoints, and the GGUFs `fak convert`
// writes against the one llama.cpp's converter wrote for the same weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "backend/backend.h"
#include "core/error.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "memory/kv_cache.h"
#include "models/gguf_export.h"
#include "models/model.h"
#include "models/quant_policy.h"
#include "runtime/session.h"
#include "test_util.h"

namespace fak {
namespace {

using nlohmann::json;
using test::bit_equal;
using test::random_ids;

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

WeightMatrix f32_matrix(const std::vector<float>& v, int64_t rows, int64_t cols) {
  return WeightMatrix{WType::F32, v.data(), rows, cols, size_t(cols) * sizeof(float)};
}

// ---- the ops, against float64 ----

// The reference router: softmax in float64, the k largest (ties to the lower id), renormalised.
void reference_route(const float* logits, int n, int k, bool renorm, std::vector<int>& ids,
                     std::vector<double>& w) {
  std::vector<double> p(static_cast<size_t>(n));
  double max = logits[0], sum = 0;
  for (int e = 0; e < n; ++e) max = std::max(max, double(logits[e]));
  for (int e = 0; e < n; ++e) sum += p[size_t(e)] = std::exp(double(logits[e]) - max);
  for (double& x : p) x /= sum;
  std::vector<int> order(static_cast<size_t>(n));
  for (int e = 0; e < n; ++e) order[size_t(e)] = e;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return p[size_t(a)] > p[size_t(b)]; });
  ids.assign(order.begin(), order.begin() + k);
  w.clear();
  double s = 0;
  for (int id : ids) s += p[size_t(id)], w.push_back(p[size_t(id)]);
  if (renorm)
    for (double& x : w) x /= s;
}

// A CPU backend call over T one-token items (the ops need a batch and a cache to exist).
struct OpsCall {
  explicit OpsCall(int T, const BufferSizes& sizes) : cache(1, 1, 8), backend(make_cpu_backend()) {
    blocks.push_back(cache.allocate());
    tokens.assign(size_t(T), 0);
    for (int t = 0; t < T; ++t) items.push_back({&blocks, nullptr, &tokens[size_t(t)], 1, t});
    call = backend->begin(items, cache, sizes, std::vector<float>(size_t(T)),
                          std::vector<float>(size_t(T)), 1);
  }
  KvCache cache;
  std::unique_ptr<Backend> backend;
  std::vector<int32_t> blocks, tokens;
  std::vector<BatchItem> items;
  std::unique_ptr<BackendCall> call;
};

BufferSizes moe_sizes(int T, int D, int I, int k) {
  BufferSizes s{};
  const size_t pairs = size_t(T) * size_t(k);
  s[size_t(Buf::MoeRows)] = pairs * size_t(D);
  s[size_t(Buf::MoeGate)] = s[size_t(Buf::MoeUp)] = pairs * size_t(I);
  return s;
}

TEST(MoeOps, RoutingIsSoftmaxTopKAndRenormalisation) {
  const int T = 9, E = 16, k = 4;
  std::vector<float> logits = randn(size_t(T) * E, 1, 2.0f);
  // Ties: token 0's experts 9, 5 and 3 share the largest logit; the lower ids win, in order.
  logits[3] = logits[5] = logits[9] = 7.0f;
  // Experts that show who ran: x = e_0, every expert's gate and up read x[0] (h = silu(1)), and
  // expert e's down writes h into dimension e alone, so out[t][e] = w(e) silu(1) for a chosen e.
  std::vector<float> gate(E, 0.0f);
  gate[0] = 1.0f;
  std::vector<std::vector<float>> down(E, std::vector<float>(E, 0.0f));
  std::vector<WeightMatrix> G, U, D;
  for (int e = 0; e < E; ++e) {
    down[size_t(e)][size_t(e)] = 1.0f;
    G.push_back(f32_matrix(gate, 1, E));
    U.push_back(f32_matrix(gate, 1, E));
    D.push_back(f32_matrix(down[size_t(e)], E, 1));
  }
  std::vector<float> x(size_t(T) * E, 0.0f);
  for (int t = 0; t < T; ++t) x[size_t(t) * E] = 1.0f;
  const double h = 1.0 / (1.0 + std::exp(-1.0));
  for (bool renorm : {true, false}) {
    OpsCall c(T, moe_sizes(T, E, 1, k));
    std::vector<float> w(size_t(T) * k), out(size_t(T) * E);
    MoeRouting r;
    r.n_experts = E;
    r.k = k;
    r.renorm = renorm;
    c.call->moe_route(logits.data(), r, w.data());
    c.call->moe_experts({G, U, D}, x.data(), k, w.data(), out.data());
    for (int t = 0; t < T; ++t) {
      std::vector<int> want_ids;
      std::vector<double> want_w;
      reference_route(&logits[size_t(t) * E], E, k, renorm, want_ids, want_w);
      double sum = 0;
      for (int j = 0; j < k; ++j) {
        EXPECT_NEAR(w[size_t(t) * k + size_t(j)], want_w[size_t(j)], 1e-6) << t << " " << j;
        sum += w[size_t(t) * k + size_t(j)];
      }
      if (renorm) {
        EXPECT_NEAR(sum, 1.0, 1e-6);
      } else {
        EXPECT_LT(sum, 1.0);
      }
      for (int e = 0; e < E; ++e) {
        const auto at = std::find(want_ids.begin(), want_ids.end(), e);
        const double want = at == want_ids.end() ? 0.0 : want_w[size_t(at - want_ids.begin())] * h;
        EXPECT_NEAR(out[size_t(t) * E + size_t(e)], want, 1e-6) << "token " << t << " expert " << e;
      }
    }
    std::vector<int> ids;
    std::vector<double> w0;
    reference_route(&logits[0], E, k, renorm, ids, w0);
    EXPECT_EQ(std::vector<int>(ids.begin(), ids.begin() + 3), (std::vector<int>{3, 5, 9}));
  }
}

// y[t] = sum_j w_j down_e(silu(gate_e x) * up_e x) over the token's experts, in float64.
// GLM-4.5's router: sigmoid scores, chosen by score + correction bias within the best group (a
// group's score: its two best), the weights the unbiased scores renormalised and scaled.
TEST(MoeOps, SigmoidRoutingPicksWithinTheBestGroupsByBiasedScore) {
  const int E = 8, k = 2;
  auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  // Group 0 (experts 0-3) holds the single best expert (3), but group 1's two best sum higher, so
  // only experts 4-7 may run; within them the bias makes expert 6 beat expert 5.
  const std::vector<float> logits = {-4.0f, -4.0f, -4.0f, 3.0f, 0.9f, 1.0f, 0.8f, -2.0f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.1f, 0.0f};
  MoeRouting r;
  r.n_experts = E;
  r.k = k;
  r.kind = RouterKind::Sigmoid;
  r.bias = &bias;
  r.groups = 2;
  r.groups_used = 1;
  r.scale = 2.5f;
  OpsCall c(1, moe_sizes(1, E, 1, k));
  std::vector<float> w(k);
  c.call->moe_route(logits.data(), r, w.data());
  // Chosen: 6 (0.690 + 0.1) then 5 (0.731); weights renormalised over the two, times 2.5.
  const double s6 = sig(0.8), s5 = sig(1.0);
  EXPECT_NEAR(w[0], 2.5 * s6 / (s6 + s5), 1e-6);
  EXPECT_NEAR(w[1], 2.5 * s5 / (s6 + s5), 1e-6);
  // Without groups expert 3 (0.953) would be first.
  r.groups = 1;
  c.call->moe_route(logits.data(), r, w.data());
  const double s3 = sig(3.0);
  EXPECT_NEAR(w[0], 2.5 * s3 / (s3 + s6), 1e-6);
}

TEST(MoeOps, ExpertsMatchAFloat64ReferenceAndDoNotDependOnTheBatch) {
  // 300 tokens x 2 experts: more (token, expert) pairs than the CPU's experts take in one group
  // (backend/cpu_backend.cpp), so groups of experts follow one another.
  const int T = 300, E = 6, k = 2, D = 32, I = 24;
  std::vector<std::vector<float>> g(E), u(E), d(E);
  std::vector<WeightMatrix> G, U, Dn;
  for (int e = 0; e < E; ++e) {
    g[size_t(e)] = randn(size_t(I) * D, 10 + e, 0.2f);
    u[size_t(e)] = randn(size_t(I) * D, 20 + e, 0.2f);
    d[size_t(e)] = randn(size_t(D) * I, 30 + e, 0.2f);
    G.push_back(f32_matrix(g[size_t(e)], I, D));
    U.push_back(f32_matrix(u[size_t(e)], I, D));
    Dn.push_back(f32_matrix(d[size_t(e)], D, I));
  }
  const std::vector<float> x = randn(size_t(T) * D, 2);
  const std::vector<float> logits = randn(size_t(T) * E, 3, 2.0f);
  auto run = [&](int n_tokens, const float* xs, const float* ls) {
    OpsCall c(n_tokens, moe_sizes(n_tokens, D, I, k));
    std::vector<float> w(size_t(n_tokens) * k), out(size_t(n_tokens) * D);
    MoeRouting r;
    r.n_experts = E;
    r.k = k;
    c.call->moe_route(ls, r, w.data());
    c.call->moe_experts({G, U, Dn}, xs, k, w.data(), out.data());
    return out;
  };
  const std::vector<float> all = run(T, x.data(), logits.data());
  for (int t = 0; t < T; ++t) {
    std::vector<int> ids;
    std::vector<double> w;
    reference_route(&logits[size_t(t) * E], E, k, true, ids, w);
    const float* xt = &x[size_t(t) * D];
    for (int o = 0; o < D; ++o) {
      double want = 0;
      for (int j = 0; j < k; ++j) {
        const int e = ids[size_t(j)];
        double y = 0;
        for (int h = 0; h < I; ++h) {
          double a = 0, b = 0;
          for (int i = 0; i < D; ++i) {
            a += double(g[size_t(e)][size_t(h) * D + size_t(i)]) * xt[i];
            b += double(u[size_t(e)][size_t(h) * D + size_t(i)]) * xt[i];
          }
          y += double(d[size_t(e)][size_t(o) * I + size_t(h)]) * (a / (1 + std::exp(-a)) * b);
        }
        want += w[size_t(j)] * y;
      }
      EXPECT_NEAR(all[size_t(t) * D + size_t(o)], want, 1e-5 * (1 + std::fabs(want)));
    }
    // The same token alone: the same bits whatever else the call held.
    const std::vector<float> alone = run(1, xt, &logits[size_t(t) * E]);
    EXPECT_EQ(0, std::memcmp(alone.data(), &all[size_t(t) * D], sizeof(float) * D)) << t;
  }
}

// ---- models ----

// A copy of a fixture directory (config.json edited by `edit`).
std::filesystem::path fixture_copy(const std::string& name,
                                   const std::function<void(json&)>& edit = {}) {
  const auto dir = test::temp_dir() / name;
  std::filesystem::create_directories(dir);
  const auto src = test::data_path("oracle/" + name);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json",
                        "tokenizer_config.json", "reference.safetensors"})
    std::filesystem::copy_file(src / f, dir / f);
  if (edit) {
    json j = json::parse(test::read_file(dir / "config.json"));
    edit(j);
    test::write_file(dir / "config.json", j.dump(2));
  }
  return dir;
}

std::vector<int32_t> reference_prompt(const std::string& name) {
  auto ref = TensorStore::open_file(test::data_path("oracle/" + name) / "reference.safetensors");
  std::vector<int32_t> ids;
  for (int64_t v : read_i64(ref.get("case0.input_ids"))) ids.push_back(int32_t(v));
  return ids;
}

using test::last_logits;

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i)
    ab += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
  return ab / std::sqrt(aa * bb);
}

TEST(MoeModel, NormTopkProbFalseLoadsConvertsAndReadsBack) {
  const std::vector<int32_t> ids = reference_prompt("qwen3-moe-tiny");
  const auto on = Model::load(fixture_copy("qwen3-moe-tiny"));
  const auto off_dir = fixture_copy("qwen3-moe-tiny", [](json& j) { j["norm_topk_prob"] = false; });
  const auto off = Model::load(off_dir);
  EXPECT_TRUE(on->config().norm_topk_prob);
  EXPECT_FALSE(off->config().norm_topk_prob);
  const std::vector<float> a = last_logits(on, ids), b = last_logits(off, ids);
  EXPECT_FALSE(bit_equal(a, b));  // unnormalised weights: another model
  // Qwen3MoeConfig's default is false: a config without the key is that model.
  const auto missing =
      Model::load(fixture_copy("qwen3-moe-tiny", [](json& j) { j.erase("norm_topk_prob"); }));
  EXPECT_FALSE(missing->config().norm_topk_prob);
  // The GGUF says so in qwen3moe.expert_weights_norm (llama.cpp has no such switch) and fak reads
  // it back: the same logits.
  const ExportStats stats = export_gguf(*off, FileType::F32, off_dir / "off.gguf");
  ASSERT_EQ(stats.warnings.size(), 1u);
  EXPECT_NE(stats.warnings[0].find("llama.cpp ignores"), std::string::npos);
  const GgufFile f = GgufFile::open(off_dir / "off.gguf");
  ASSERT_NE(f.find("qwen3moe.expert_weights_norm"), nullptr);
  EXPECT_FALSE(f.get_bool("qwen3moe.expert_weights_norm"));
  const auto back = Model::load(off_dir / "off.gguf", {.load_tokenizer = false});
  EXPECT_FALSE(back->config().norm_topk_prob);
  EXPECT_TRUE(bit_equal(last_logits(back, ids), b));
}

// Bad MoE configs are refused at load, each with one message naming the field.
// Gemma 3's and GLM-4.5's config fields that fak does not implement, or that cannot hold, are
// refused naming them (never run as another model).
TEST(NewFamilies, BadConfigsAreRefusedNamingTheField) {
  auto error = [](const std::string& fixture, const std::function<void(json&)>& edit) {
    try {
      Model::load(fixture_copy(fixture, edit), {.load_tokenizer = false});
      return std::string("ok");
    } catch (const Error& e) {
      return std::string(e.what());
    }
  };
  auto refuses = [&](const std::string& fixture, const std::function<void(json&)>& edit,
                     const std::string& names) {
    const std::string e = error(fixture, edit);
    EXPECT_NE(e.find(names), std::string::npos) << fixture << ": " << e;
  };
  EXPECT_EQ(error("gemma3-tiny", {}), "ok");
  EXPECT_EQ(error("glm4moe-tiny", {}), "ok");
  refuses(
      "gemma3-tiny", [](json& j) { j["final_logit_softcapping"] = 30.0; },
      "final_logit_softcapping");
  refuses(
      "gemma3-tiny", [](json& j) { j["hidden_activation"] = "gelu"; }, "hidden_activation");
  refuses(
      "gemma3-tiny", [](json& j) { j["query_pre_attn_scalar"] = -4; }, "query_pre_attn_scalar");
  refuses(
      "gemma3-tiny", [](json& j) { j["sliding_window"] = 0; }, "sliding_window");
  // Left out, it is transformers' Gemma3TextConfig default, as the published 4B-27B configs rely
  // on (checkpoint_layout_test.cpp).
  EXPECT_EQ(Model::load(fixture_copy("gemma3-tiny", [](json& j) { j.erase("sliding_window"); }),
                        {.load_tokenizer = false})
                ->config()
                .layers[0]
                .window,
            4096);
  refuses(
      "gemma3-tiny", [](json& j) { j["rope_local_base_freq"] = 0; }, "rope_local_base_freq");
  refuses(
      "glm4moe-tiny", [](json& j) { j["n_group"] = 3; }, "groups");
  refuses(
      "glm4moe-tiny", [](json& j) { j["topk_group"] = 5; }, "topk_group");
  refuses(
      "glm4moe-tiny", [](json& j) { j["routed_scaling_factor"] = 0; }, "routed_scaling_factor");
  refuses(
      "glm4moe-tiny", [](json& j) { j["hidden_act"] = "gelu"; }, "hidden_act");
  refuses(
      "glm4moe-tiny", [](json& j) { j["num_experts_per_tok"] = 8; }, "num_experts_per_tok");
  EXPECT_EQ(error("gpt-oss-tiny", {}), "ok");
  refuses(
      "gpt-oss-tiny", [](json& j) { j["swiglu_limit"] = 0; }, "swiglu_limit");
  refuses(
      "gpt-oss-tiny", [](json& j) { j["num_experts_per_tok"] = 9; }, "num_experts_per_tok");
  refuses(
      "gpt-oss-tiny", [](json& j) { j["attention_bias"] = false; }, "attention_bias");
  refuses(
      "gpt-oss-tiny", [](json& j) { j.erase("num_local_experts"); }, "num_local_experts");
  refuses(
      "gpt-oss-tiny", [](json& j) { j["layer_types"][1] = "chunked_attention"; }, "layer_types[1]");
}

TEST(MoeModel, BadConfigsAreRefusedNamingTheField) {
  auto error = [](const std::function<void(json&)>& edit) {
    try {
      Model::load(fixture_copy("qwen3-moe-tiny", edit), {.load_tokenizer = false});
      return std::string("ok");
    } catch (const Error& e) {
      return std::string(e.what());
    }
  };
  EXPECT_NE(error([](json& j) { j["num_experts_per_tok"] = 9; }).find("experts per token"),
            std::string::npos);
  EXPECT_NE(error([](json& j) { j["num_experts"] = 1 << 20; }).find("num_experts"),
            std::string::npos);
  EXPECT_NE(error([](json& j) { j.erase("moe_intermediate_size"); }).find("moe_intermediate_size"),
            std::string::npos);
  EXPECT_NE(error([](json& j) { j["mlp_only_layers"] = {7}; }).find("mlp_only_layers"),
            std::string::npos);
  EXPECT_NE(error([](json& j) {
              j["num_hidden_layers"] = 4000;
              j["num_experts"] = 4000;
            }).find("layers x experts"),
            std::string::npos);
  // A dense layer needs intermediate_size and its MLP tensors: named when missing.
  EXPECT_NE(error([](json& j) { j["mlp_only_layers"] = {0}; }).find("mlp.gate_proj.weight"),
            std::string::npos);
  // Fewer experts than the file holds: the router's shape says so.
  EXPECT_NE(error([](json& j) { j["num_experts"] = 7; }).find("mlp.gate.weight' has shape [8, 64]"),
            std::string::npos);
}

// A random-weight model from `fak synth`: a fixture's config, edited, with its tokenizer.
std::filesystem::path synth_from(const std::string& fixture, const std::string& name,
                                 const std::function<void(json&)>& edit) {
  const auto dir = test::temp_dir() / name;
  std::filesystem::create_directories(dir);
  json c = json::parse(test::read_file(test::data_path("oracle/" + fixture + "/config.json")));
  edit(c);
  test::write_file(dir / "in.json", c.dump(2));
  const auto r = test::run_fak("synth --config " + (dir / "in.json").string() + " -o " +
                               (dir / "hf").string() + " --dtype f32 --std 0.05 --seed 7");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(test::data_path("oracle/" + fixture) / f, dir / "hf" / f);
  return dir / "hf";
}

// A Qwen3 MoE of 256-wide rows (so every K-quant fits whole blocks), dense layers between the
// sparse ones (decoder_sparse_step 2, and layer 3 in mlp_only_layers).
std::filesystem::path synth_moe(const std::string& name) {
  return synth_from("qwen3-moe-tiny", name, [](json& c) {
    c["hidden_size"] = 256;
    c["num_attention_heads"] = 4;
    c["num_key_value_heads"] = 2;
    c["head_dim"] = 64;
    c["intermediate_size"] = 512;
    c["moe_intermediate_size"] = 256;
    c["num_experts"] = 16;
    c["num_experts_per_tok"] = 4;
    c["num_hidden_layers"] = 4;
    c["decoder_sparse_step"] = 2;
    c["mlp_only_layers"] = {3};
  });
}

// Value heads wider than key heads: fak runs it from HF and from its own GGUF, and says that
// llama.cpp (which takes one width for both) would refuse the file.
TEST(MoeModel, HybridWithValueHeadsWiderThanKeyHeads) {
  const auto dir = synth_from("qwen35-moe-tiny", "wide_values", [](json& c) {
    c["linear_value_head_dim"] = 24;
    c["num_experts"] = 6;
    c["num_experts_per_tok"] = 3;
  });
  const auto hf = Model::load(dir);
  ASSERT_EQ(hf->config().linear_value_head_dim, 24);
  const ExportStats stats = export_gguf(*hf, FileType::F32, dir / "f32.gguf");
  ASSERT_EQ(stats.warnings.size(), 1u);
  EXPECT_NE(stats.warnings[0].find("linear_value_head_dim (24)"), std::string::npos);
  const auto g = Model::load(dir / "f32.gguf", {.load_tokenizer = false});
  EXPECT_EQ(g->config().linear_value_head_dim, 24);
  const auto ids = random_ids(40, hf->config().vocab, 5);
  EXPECT_TRUE(bit_equal(last_logits(hf, ids), last_logits(g, ids)));
}

TEST(MoeModel, DenseLayersBetweenSparseOnesInHfAndGguf) {
  const auto dir = synth_moe("sparse_step");
  const auto hf = Model::load(dir);
  const ModelConfig& c = hf->config();
  // Sparse where (layer + 1) % 2 == 0, unless listed in mlp_only_layers: layer 1 only.
  std::vector<FfnKind> ffns;
  for (const LayerSlot& s : c.layers) ffns.push_back(s.ffn);
  EXPECT_EQ(ffns,
            (std::vector<FfnKind>{FfnKind::Dense, FfnKind::Moe, FfnKind::Dense, FfnKind::Dense}));
  const ExportStats stats = export_gguf(*hf, FileType::F32, dir / "f32.gguf");
  ASSERT_EQ(stats.warnings.size(), 1u);
  EXPECT_NE(stats.warnings[0].find("some layers are dense"), std::string::npos);
  const auto g = Model::load(dir / "f32.gguf", {.load_tokenizer = false});
  EXPECT_EQ(g->config().layers, c.layers);
  const auto ids = random_ids(40, c.vocab, 3);
  EXPECT_TRUE(bit_equal(last_logits(hf, ids), last_logits(g, ids)));
}

// Quantised experts are computed as stored (never widened), and a token's output does not depend
// on how the call grouped tokens by expert: prefill == decode == batched, bit for bit.
class MoeQuant : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeQuant, ExpertsStayQuantisedAndAreBatchInvariant) {
  static const std::filesystem::path hf_dir = synth_moe("quant_src");
  const FileType ft = parse_file_type(GetParam());
  const auto hf = Model::load(hf_dir);
  const auto path = hf_dir.parent_path() / (GetParam() + ".gguf");
  export_gguf(*hf, ft, path);
  const auto q = Model::load(path);
  const ModelConfig& c = q->config();
  const MoeWeights& moe = q->weights().layers[1].moe;
  ASSERT_EQ(moe.gate.size(), 16u);
  for (const auto& [name, experts] : {std::pair{"ffn_gate_exps", &moe.gate},
                                      {"ffn_up_exps", &moe.up},
                                      {"ffn_down_exps", &moe.down}}) {
    const WType want = choose_wtype(ft, name, 1, c.n_layers, 256, false, c.n_experts);
    ASSERT_TRUE(wtype_quant(want).has_value()) << name;
    for (const WeightMatrix& m : *experts) EXPECT_EQ(m.type, want) << name;
  }
  EXPECT_EQ(moe.router.type, WType::F32);  // never quantised, as llama-quantize
  const auto ids = random_ids(37, c.vocab, 5);
  auto cache = std::make_shared<KvCache>(q->n_attention_layers(), c.n_kv_heads, c.head_dim,
                                         KvCacheOptions{.block_size = 16});
  Session whole(q, cache);
  whole.append(ids);
  Session steps(q, cache);
  for (int32_t t : ids) steps.append({&t, 1});
  EXPECT_TRUE(bit_equal(whole.logits(), steps.logits()));
  // Batched decode: two sequences in one step equal each alone.
  Session a = whole.clone(), b(q, cache), b_alone(q, cache);
  b.append({ids.data(), 11});
  b_alone.append({ids.data(), 11});
  Session a_alone = whole.clone();
  std::vector<Session*> both{&a, &b};
  const std::vector<int32_t> next{3, 9};
  decode_batch(both, next);
  a_alone.append({&next[0], 1});
  b_alone.append({&next[1], 1});
  EXPECT_TRUE(bit_equal(a.logits(), a_alone.logits()));
  EXPECT_TRUE(bit_equal(b.logits(), b_alone.logits()));
  // Computed as stored: the same weights widened to f32 (an f32 GGUF of the quantised model)
  // give the same logits up to the activations' own 8-bit quantisation.
  export_gguf(*q, FileType::F32, path.string() + ".f32.gguf");
  const auto widened = Model::load(path.string() + ".f32.gguf", {.load_tokenizer = false});
  const double cos = cosine(whole.logits(), last_logits(widened, ids));
  EXPECT_GT(cos, 0.999) << GetParam();
  // And near the f32 original (a random model of 4 layers amplifies 4-bit noise; not a bound on
  // real checkpoints).
  EXPECT_GT(cosine(whole.logits(), last_logits(hf, ids)), 0.9) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Types, MoeQuant,
                         ::testing::Values("q8_0", "q4_0", "q5_1", "q4_k_m", "q5_k_m", "q6_k"));

// A published Qwen3.5 MoE checkpoint is the multimodal Qwen3_5MoeForConditionalGeneration: the
// text model under model.language_model., beside a vision tower and an MTP head.
TEST(MoeModel, MultimodalCheckpointLoadsTheLanguageModelAndSaysWhatItSkips) {
  const std::string name = "qwen35-moe-tiny";
  const auto dir = test::temp_dir() / "multimodal";
  std::filesystem::create_directories(dir);
  const auto src = test::data_path("oracle/" + name);
  json text = json::parse(test::read_file(src / "config.json"));
  json root{{"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
            {"model_type", "qwen3_5_moe"},
            {"text_config", text},
            {"vision_config", {{"depth", 1}}},
            {"tie_word_embeddings", false}};
  test::write_file(dir / "config.json", root.dump(2));
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(src / f, dir / f);
  const SafetensorsFile in = SafetensorsFile::open(src / "model.safetensors");
  std::vector<TensorToWrite> out;
  for (const TensorInfo& t : in.tensors()) {
    std::string n = t.name;
    if (n.rfind("model.", 0) == 0) n = "model.language_model." + n.substr(6);
    out.push_back(
        {n, t.dtype, t.shape, std::string_view(reinterpret_cast<const char*>(t.data), t.nbytes)});
  }
  const std::vector<float> vision(16, 0.5f), mtp(64, 0.25f);
  out.push_back({"model.visual.blocks.0.attn.qkv.weight",
                 DType::F32,
                 {4, 4},
                 std::string_view(reinterpret_cast<const char*>(vision.data()), 64)});
  out.push_back({"mtp.norm.weight",
                 DType::F32,
                 {64},
                 std::string_view(reinterpret_cast<const char*>(mtp.data()), 256)});
  write_safetensors(dir / "model.safetensors", out, {{"format", "pt"}});
  const auto m = Model::load(dir);
  EXPECT_NE(m->load_note().find("2 tensors"), std::string::npos) << m->load_note();
  EXPECT_NE(m->load_note().find("vision tower"), std::string::npos) << m->load_note();
  const auto ids = reference_prompt(name);
  const auto plain = Model::load(test::data_path("oracle/" + name));
  EXPECT_TRUE(bit_equal(last_logits(m, ids), last_logits(plain, ids)));
  // The CLI says it in one line.
  const auto r = test::run_fak("run -m " + dir.string() + " --ids 1,2,3 -n 1");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("vision tower"), std::string::npos) << r.err;
}

// `fak convert` writes what llama.cpp's converter wrote for the same weights: the fixtures'
// model.gguf came from it (convert_hf_to_gguf.py's mapping, F32).
class MoeConvert : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeConvert, MatchesLlamaCppsConverterTensorByTensor) {
  const auto dir = fixture_copy(GetParam());
  export_gguf(*Model::load(dir), FileType::F32, dir / "fak.gguf");
  const GgufFile ours = GgufFile::open(dir / "fak.gguf");
  const GgufFile theirs = GgufFile::open(test::data_path("oracle/" + GetParam()) / "model.gguf");
  ASSERT_EQ(ours.tensors().size(), theirs.tensors().size());
  for (const GgufTensor& t : theirs.tensors()) {
    const GgufTensor* o = ours.tensor(t.name);
    ASSERT_NE(o, nullptr) << t.name;
    // llama.cpp writes the one-row shared-expert gate {H, 1}; both read either.
    std::vector<int64_t> dims = t.dims;
    EXPECT_EQ(o->dims, dims) << t.name;
    EXPECT_EQ(o->ggml_type, t.ggml_type) << t.name;
    ASSERT_EQ(o->nbytes, t.nbytes) << t.name;
    const float* a = reinterpret_cast<const float*>(o->data);
    const float* b = reinterpret_cast<const float*>(t.data);
    for (int64_t i = 0; i < t.n_elements(); ++i)
      ASSERT_NEAR(a[i], b[i], 1e-6f * (1 + std::fabs(b[i]))) << t.name << "[" << i << "]";
  }
  // Every model key llama.cpp wrote, with the same value.
  const std::string arch = theirs.get_string("general.architecture");
  EXPECT_EQ(ours.get_string("general.architecture"), arch);
  for (const GgufKv& kv : theirs.metadata()) {
    if (kv.key.rfind(arch + ".", 0) != 0) continue;
    const GgufValue* v = ours.find(kv.key);
    ASSERT_NE(v, nullptr) << kv.key;
    if (kv.value.type == GgufType::ARRAY) {
      EXPECT_EQ(v->array.size(), kv.value.array.size()) << kv.key;
    } else if (kv.value.type == GgufType::F32) {
      EXPECT_FLOAT_EQ(float(v->f), float(kv.value.f)) << kv.key;
    } else {
      EXPECT_EQ(v->u, kv.value.u) << kv.key;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MoeConvert,
                         ::testing::Values("qwen3-moe-tiny", "qwen35-moe-tiny"),
                         [](const auto& info) { return test::fixture_name(info.param); });

}  // namespace
}  // namespace fak
