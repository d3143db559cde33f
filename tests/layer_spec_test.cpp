// LayerSpec: what each layer computes, read from the families' published-style configs (the HF
// oracle fixtures), and the CUDA backend's rule for what its kernels lack, applied to them.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "cuda/cuda_support.h"
#include "models/config.h"
#include "test_util.h"

namespace fak {
namespace {

ModelConfig oracle_config(const std::string& name) {
  return load_hf_config(test::data_path("oracle/" + name + "/config.json"));
}

std::vector<LayerSpec> specs(const ModelConfig& c) {
  std::vector<LayerSpec> out;
  for (int l = 0; l < c.n_layers; ++l) out.push_back(c.layer_spec(l));
  return out;
}

TEST(LayerSpec, LlamaIsPlainAttentionAndASwiGluMlp) {
  const ModelConfig c = oracle_config("llama-tiny");
  for (const LayerSpec& s : specs(c)) {
    EXPECT_EQ(s.mixer, LayerKind::FullAttention);
    EXPECT_EQ(s.attention.window, 0);
    EXPECT_EQ(s.attention.rope_table, 0);
    EXPECT_FLOAT_EQ(s.attention.scale, 1.0f / 4.0f);  // head_dim 16
    EXPECT_FALSE(s.attention.qk_norm || s.attention.output_gate || s.attention.sinks);
    EXPECT_EQ(s.ffn.kind, FfnKind::Dense);
    EXPECT_EQ(s.ffn.act, Activation::Silu);
    EXPECT_FALSE(s.norms.sandwich || s.norms.plus_one);
  }
  EXPECT_EQ(cuda_unsupported({c.embed_scale, specs(c)}), "");
}

TEST(LayerSpec, Gemma3WindowsFiveOfSixLayersWithTheLocalRope) {
  const ModelConfig c = oracle_config("gemma3-tiny");
  const auto s = specs(c);
  ASSERT_EQ(s.size(), 6u);
  for (int l = 0; l < 6; ++l) {
    const bool local = l < 5;
    EXPECT_EQ(s[size_t(l)].attention.window, local ? 8 : 0) << l;
    EXPECT_EQ(s[size_t(l)].attention.rope_table, local ? 1 : 0) << l;
    EXPECT_FLOAT_EQ(s[size_t(l)].attention.scale, float(1.0 / std::sqrt(32.0)));
    EXPECT_TRUE(s[size_t(l)].attention.qk_norm);
    EXPECT_EQ(s[size_t(l)].ffn.act, Activation::GeluTanh);
    EXPECT_TRUE(s[size_t(l)].norms.sandwich);
    EXPECT_TRUE(s[size_t(l)].norms.plus_one);
  }
  EXPECT_EQ(cuda_unsupported({c.embed_scale, s}), "scaled embeddings");
  EXPECT_EQ(cuda_unsupported({1.0f, s}), "layer 0: sliding-window attention");
}

TEST(LayerSpec, GptOssHasSinksWindowsAndBiasedClampedExperts) {
  const ModelConfig c = oracle_config("gpt-oss-tiny");
  const auto s = specs(c);
  ASSERT_EQ(s.size(), 4u);
  for (int l = 0; l < 4; ++l) {
    EXPECT_EQ(s[size_t(l)].attention.window, l % 2 == 0 ? 8 : 0) << l;
    EXPECT_EQ(s[size_t(l)].attention.rope_table, 0) << l;  // one RoPE for every layer
    EXPECT_TRUE(s[size_t(l)].attention.sinks);
    EXPECT_EQ(s[size_t(l)].ffn.kind, FfnKind::Moe);
    EXPECT_EQ(s[size_t(l)].ffn.router, RouterKind::SoftmaxChosen);
    EXPECT_EQ(s[size_t(l)].ffn.expert_act, Activation::ClampedSwiglu);
    EXPECT_TRUE(s[size_t(l)].ffn.expert_biases);
    EXPECT_EQ(s[size_t(l)].ffn.k, c.n_experts_used);
  }
  EXPECT_EQ(cuda_unsupported({c.embed_scale, s}), "layer 0: sliding-window attention");
  EXPECT_EQ(cuda_unsupported({c.embed_scale, std::span(s).subspan(1, 1)}),
            "layer 0: attention sinks");
}

TEST(LayerSpec, Glm45HasADenseFirstLayerThenSigmoidRoutedExperts) {
  const ModelConfig c = oracle_config("glm4moe-tiny");
  const auto s = specs(c);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].ffn.kind, FfnKind::Dense);
  for (int l = 1; l < 3; ++l) {
    EXPECT_EQ(s[size_t(l)].ffn.kind, FfnKind::Moe) << l;
    EXPECT_EQ(s[size_t(l)].ffn.router, RouterKind::Sigmoid);
    EXPECT_GT(s[size_t(l)].ffn.shared_hidden, 0);
    EXPECT_FALSE(s[size_t(l)].ffn.shared_gated);
    EXPECT_EQ(s[size_t(l)].ffn.groups, c.n_expert_groups);
    EXPECT_EQ(s[size_t(l)].ffn.routed_scale, c.routed_scaling);
  }
  EXPECT_EQ(cuda_unsupported({c.embed_scale, s}),
            "layer 1: a sigmoid or chosen-softmax MoE router");
}

TEST(LayerSpec, Qwen35HybridMixesDeltaNetAndGatedAttention) {
  const ModelConfig c = oracle_config("qwen35-hybrid-tiny");
  const auto s = specs(c);
  ASSERT_EQ(s.size(), 4u);
  for (int l = 0; l < 4; ++l) {
    EXPECT_EQ(s[size_t(l)].mixer, l == 3 ? LayerKind::FullAttention : LayerKind::LinearAttention);
    EXPECT_TRUE(s[size_t(l)].attention.output_gate);
    EXPECT_TRUE(s[size_t(l)].norms.plus_one);
  }
  EXPECT_EQ(cuda_unsupported({c.embed_scale, s}), "");
  // The MTP head's layer: full attention with the model's RoPE, whatever the layers around it.
  EXPECT_EQ(c.layer_spec(-1).mixer, LayerKind::FullAttention);
  EXPECT_EQ(c.layer_spec(-1).attention.window, 0);
  EXPECT_THROW(c.layer_spec(4), Error);
}

TEST(LayerSpec, Qwen35MoeRoutesBySoftmaxWithAGatedSharedExpert) {
  const ModelConfig c = oracle_config("qwen35-moe-tiny");
  for (const LayerSpec& s : specs(c)) {
    EXPECT_EQ(s.ffn.kind, FfnKind::Moe);
    EXPECT_EQ(s.ffn.router, RouterKind::Softmax);
    EXPECT_GT(s.ffn.shared_hidden, 0);
    EXPECT_TRUE(s.ffn.shared_gated);
  }
  EXPECT_EQ(cuda_unsupported({c.embed_scale, specs(c)}), "");
}

}  // namespace
}  // namespace fak
