// GGUF for the Qwen3.5 hybrid (llama.cpp's "qwen35"): the file fak writes checked against
// llama.cpp's conventions straight from the HF tensors (names and dims as its qwen35 loader creates
// them, norms as 1 + w, ssm_a = -exp(A_log), value heads in tiled order), and the weights fak
// loads back equal to the HF load. Logits: gguf_model_test.cpp (GgufRoundTrip).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "io/safetensors.h"
#include "memory/kv_cache.h"
#include "models/gguf_export.h"
#include "models/model.h"
#include "models/qwen35_gguf.h"
#include "runtime/session.h"
#include "test_util.h"

namespace fak {
namespace {

// The hybrid fixture plus the Qwen tokenizer (a GGUF needs a vocabulary).
std::filesystem::path fixture_with_tokenizer() {
  const auto dir = test::temp_dir() / "hybrid";
  std::filesystem::create_directories(dir);
  const auto src = test::data_path("oracle/qwen35-hybrid-tiny");
  for (const char* f : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(src / f, dir / f);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(test::data_path("tokenizer/qwen") / f, dir / f);
  return dir;
}

std::vector<float> gguf_f32(const GgufFile& f, const std::string& name) {
  const GgufTensor* t = f.tensor(name);
  EXPECT_TRUE(t) << name;
  if (!t) return {};
  EXPECT_EQ(t->ggml_type, 0u) << name << " is not F32";
  std::vector<float> v(t->nbytes / 4);
  std::memcpy(v.data(), t->data, t->nbytes);
  return v;
}

}  // namespace

TEST(GgufHybrid, FollowsLlamaCppQwen35Layout) {
  const auto dir = fixture_with_tokenizer();
  auto hf = Model::load(dir);
  export_gguf(*hf, FileType::F32, dir / "m.gguf");
  const GgufFile f = GgufFile::open(dir / "m.gguf");
  auto st = SafetensorsFile::open(dir / "model.safetensors");
  auto raw = [&](const std::string& name) { return read_f32(*st.find(name)); };

  EXPECT_EQ(f.get_string("general.architecture"), "qwen35");
  const std::map<std::string, uint64_t> ints = {{"qwen35.block_count", 4},
                                                {"qwen35.embedding_length", 64},
                                                {"qwen35.feed_forward_length", 176},
                                                {"qwen35.attention.head_count", 4},
                                                {"qwen35.attention.head_count_kv", 2},
                                                {"qwen35.attention.key_length", 32},
                                                {"qwen35.rope.dimension_count", 8},
                                                {"qwen35.ssm.conv_kernel", 4},
                                                {"qwen35.ssm.state_size", 16},
                                                {"qwen35.ssm.group_count", 2},
                                                {"qwen35.ssm.time_step_rank", 4},
                                                {"qwen35.ssm.inner_size", 64},
                                                {"qwen35.full_attention_interval", 4}};
  for (const auto& [key, want] : ints) EXPECT_EQ(f.get_u64(key), want) << key;
  EXPECT_EQ(f.get_array("qwen35.rope.dimension_sections").size(), 4u);

  // Names and dims (ne0 first) as llama.cpp's qwen35 loader creates them.
  const int64_t E = 64, conv = 2 * 32 + 64, V = 64, nv = 4, K = 4, dv = 16;
  std::map<std::string, std::vector<int64_t>> want = {
      {"token_embd.weight", {E, 512}}, {"output_norm.weight", {E}}, {"output.weight", {E, 512}}};
  for (int l = 0; l < 4; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    want[b + "attn_norm.weight"] = {E};
    want[b + "post_attention_norm.weight"] = {E};
    want[b + "ffn_gate.weight"] = {E, 176};
    want[b + "ffn_up.weight"] = {E, 176};
    want[b + "ffn_down.weight"] = {176, E};
    if (l == 3) {
      want[b + "attn_q.weight"] = {E, 2 * 4 * 32};
      want[b + "attn_k.weight"] = {E, 64};
      want[b + "attn_v.weight"] = {E, 64};
      want[b + "attn_output.weight"] = {128, E};
      want[b + "attn_q_norm.weight"] = {32};
      want[b + "attn_k_norm.weight"] = {32};
    } else {
      want[b + "attn_qkv.weight"] = {E, conv};
      want[b + "attn_gate.weight"] = {E, V};
      want[b + "ssm_conv1d.weight"] = {K, conv};
      want[b + "ssm_dt.bias"] = {nv};
      want[b + "ssm_a"] = {nv};
      want[b + "ssm_beta.weight"] = {E, nv};
      want[b + "ssm_alpha.weight"] = {E, nv};
      want[b + "ssm_norm.weight"] = {dv};
      want[b + "ssm_out.weight"] = {V, E};
    }
  }
  std::map<std::string, std::vector<int64_t>> got;
  for (const GgufTensor& t : f.tensors()) got[t.name] = t.dims;
  EXPECT_EQ(got, want);

  // Values. Tiled value-head order for 2 key heads x 2 value heads each: HF heads 0, 2, 1, 3.
  const int perm[4] = {0, 2, 1, 3};
  const std::string h = "model.layers.1.linear_attn.";
  const auto in_norm = raw("model.layers.1.input_layernorm.weight");
  const auto g_norm = gguf_f32(f, "blk.1.attn_norm.weight");
  for (size_t i = 0; i < in_norm.size(); ++i) ASSERT_EQ(g_norm[i], in_norm[i] + 1.0f) << i;
  EXPECT_EQ(gguf_f32(f, "blk.1.ssm_norm.weight"), raw(h + "norm.weight"));  // not shifted
  const auto a_log = raw(h + "A_log"), dt = raw(h + "dt_bias");
  const auto ssm_a = gguf_f32(f, "blk.1.ssm_a"), ssm_dt = gguf_f32(f, "blk.1.ssm_dt.bias");
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(ssm_a[size_t(t)], float(-std::exp(double(a_log[size_t(perm[t])])))) << t;
    EXPECT_EQ(ssm_dt[size_t(t)], dt[size_t(perm[t])]) << t;
  }
  const auto alpha = raw(h + "in_proj_a.weight"), g_alpha = gguf_f32(f, "blk.1.ssm_alpha.weight");
  for (int t = 0; t < 4; ++t)
    for (int64_t c = 0; c < E; ++c)
      ASSERT_EQ(g_alpha[size_t(t * E + c)], alpha[size_t(perm[t] * E + c)]);
  const auto qkv = raw(h + "in_proj_qkv.weight"), g_qkv = gguf_f32(f, "blk.1.attn_qkv.weight");
  for (int64_t r = 0; r < conv; ++r) {  // q and k rows as they are, v rows by head
    const int64_t src = r < 64 ? r : 64 + perm[(r - 64) / dv] * dv + (r - 64) % dv;
    for (int64_t c = 0; c < E; ++c) ASSERT_EQ(g_qkv[size_t(r * E + c)], qkv[size_t(src * E + c)]);
  }
  const auto cw = raw(h + "conv1d.weight"), g_cw = gguf_f32(f, "blk.1.ssm_conv1d.weight");
  for (int64_t ch = 0; ch < conv; ++ch) {
    const int64_t src = ch < 64 ? ch : 64 + perm[(ch - 64) / dv] * dv + (ch - 64) % dv;
    for (int64_t k = 0; k < K; ++k) ASSERT_EQ(g_cw[size_t(ch * K + k)], cw[size_t(src * K + k)]);
  }
  const auto out = raw(h + "out_proj.weight"), g_out = gguf_f32(f, "blk.1.ssm_out.weight");
  for (int64_t r = 0; r < E; ++r)
    for (int64_t c = 0; c < V; ++c)
      ASSERT_EQ(g_out[size_t(r * V + c)], out[size_t(r * V + perm[c / dv] * dv + c % dv)]);
}

// Loading the f32 file gives back the HF load's weights bit for bit (A_log included: both hold
// it as llama.cpp's ssm_a = -exp(A_log)).
TEST(GgufHybrid, LoadRestoresTheHfWeights) {
  const auto dir = fixture_with_tokenizer();
  auto hf = Model::load(dir);
  export_gguf(*hf, FileType::F32, dir / "m.gguf");
  auto g = Model::load(dir / "m.gguf");
  ASSERT_TRUE(g->config().is_hybrid());
  EXPECT_EQ(g->config().layers, hf->config().layers);
  EXPECT_EQ(g->config().linear_value_head_dim, 16);
  EXPECT_EQ(g->config().rotary_dim, hf->config().rotary_dim);
  auto same = [](const WeightMatrix& a, const WeightMatrix& b) {
    return a.type == b.type && a.rows == b.rows && a.cols == b.cols &&
           std::memcmp(a.data, b.data, a.bytes()) == 0;
  };
  for (int l = 0; l < 4; ++l) {
    const LayerWeights& A = hf->weights().layers[size_t(l)];
    const LayerWeights& B = g->weights().layers[size_t(l)];
    EXPECT_EQ(A.attn_norm, B.attn_norm) << l;
    EXPECT_EQ(A.mlp_norm, B.mlp_norm) << l;
    EXPECT_TRUE(same(A.mlp.down, B.mlp.down)) << l;
    if (A.kind == LayerKind::FullAttention) {
      EXPECT_TRUE(same(A.attn.wq, B.attn.wq)) << l;
      EXPECT_EQ(A.attn.q_norm, B.attn.q_norm) << l;
      continue;
    }
    const DeltaNetWeights &x = A.delta, &y = B.delta;
    EXPECT_TRUE(same(x.in_proj_qkv, y.in_proj_qkv)) << l;
    EXPECT_TRUE(same(x.in_proj_z, y.in_proj_z)) << l;
    EXPECT_TRUE(same(x.in_proj_a, y.in_proj_a)) << l;
    EXPECT_TRUE(same(x.in_proj_b, y.in_proj_b)) << l;
    EXPECT_TRUE(same(x.out_proj, y.out_proj)) << l;
    EXPECT_EQ(x.conv1d, y.conv1d) << l;
    EXPECT_EQ(x.dt_bias, y.dt_bias) << l;
    EXPECT_EQ(x.norm, y.norm) << l;
    EXPECT_EQ(x.ssm_a, y.ssm_a) << l;
  }
}

TEST(GgufHybrid, MissingSsmMetadataIsOneClearError) {
  const auto dir = fixture_with_tokenizer();
  export_gguf(*Model::load(dir), FileType::F32, dir / "m.gguf");
  const GgufFile f = GgufFile::open(dir / "m.gguf");
  GgufWriter w;
  for (const GgufKv& kv : f.metadata())
    if (kv.key != "qwen35.ssm.conv_kernel" && kv.key != "general.alignment")
      w.set(kv.key, kv.value);
  for (const GgufTensor& t : f.tensors())
    w.add_tensor(t.name, t.ggml_type, t.dims, {t.data, t.nbytes});
  w.write(dir / "bad.gguf");
  try {
    Model::load(dir / "bad.gguf");
    FAIL() << "loaded a qwen35 file without ssm.conv_kernel";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("qwen35.ssm.conv_kernel"), std::string::npos) << e.what();
  }
}

// llama.cpp's reorder: view the value heads as [n_k_heads][group], swap the two axes. At the real
// 27B's 16 key / 48 value heads, tiled position j * 16 + k holds HF head k * 3 + j.
TEST(GgufHybrid, ValueHeadOrderIsLlamaCppsTiling) {
  const VHeadOrder order{16, 48};
  for (int64_t k = 0; k < 16; ++k)
    for (int64_t j = 0; j < 3; ++j) {
      EXPECT_EQ(order.grouped_at(j * 16 + k), k * 3 + j);
      EXPECT_EQ(order.tiled_at(k * 3 + j), j * 16 + k);
    }
}

// llama.cpp files of Qwen3.5/3.6 may append multi-token-prediction blocks: block_count counts them
// and nextn_predict_layers says how many. The decoder computes the same without them; a block
// without the head's projection is not a head (it is left unread), and one that has it but misses
// another of the head's tensors is refused naming it (tests/mtp_test.cpp loads whole heads).
TEST(GgufHybrid, MtpBlocksLeaveTheDecoderAsItIs) {
  const auto dir = fixture_with_tokenizer();
  auto hf = Model::load(dir);
  export_gguf(*hf, FileType::F32, dir / "m.gguf");
  const GgufFile f = GgufFile::open(dir / "m.gguf");
  GgufWriter w;
  for (const GgufKv& kv : f.metadata())
    if (kv.key != "general.alignment") w.set(kv.key, kv.value);
  w.set_u32("qwen35.block_count", 5);
  w.set_u32("qwen35.nextn_predict_layers", 1);
  for (const GgufTensor& t : f.tensors())
    w.add_tensor(t.name, t.ggml_type, t.dims, {t.data, t.nbytes});
  std::vector<float> norm(64, 1.0f);
  w.add_tensor("blk.4.nextn.enorm.weight", 0, {64},
               {reinterpret_cast<const uint8_t*>(norm.data()), norm.size() * 4});
  w.write(dir / "mtp.gguf");
  auto g = Model::load(dir / "mtp.gguf");
  EXPECT_EQ(g->config().n_layers, 4);
  EXPECT_EQ(g->config().mtp_layers, 0);
  // With the projection but not the rest of the head: refused, naming what is missing.
  std::vector<float> eh(64 * 128, 0.25f);
  w.add_tensor("blk.4.nextn.eh_proj.weight", 0, {128, 64},
               {reinterpret_cast<const uint8_t*>(eh.data()), eh.size() * 4});
  w.write(dir / "half-mtp.gguf");
  try {
    Model::load(dir / "half-mtp.gguf");
    ADD_FAILURE() << "a head missing its tensors loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor 'blk.4.nextn."), std::string::npos)
        << e.what();
  }
  auto plain = Model::load(dir / "m.gguf");
  std::vector<int32_t> ids = {5, 77, 301, 9, 12, 480, 33};
  auto logits = [&](std::shared_ptr<const Model> m) { return test::last_logits(m, ids); };
  EXPECT_EQ(logits(g), logits(plain));
}

namespace {

// The real 27B's head structure (16 key / 48 value heads of 128) at a tiny width, 4 layers, f32:
// an HF directory `m` in a new temporary folder (returned).
std::filesystem::path real_head_layout_model() {
  auto cfg =
      nlohmann::json::parse(test::read_file(test::data_path("configs/qwen3.6-27b-text.json")));
  cfg["hidden_size"] = 64;
  cfg["intermediate_size"] = 96;
  cfg["vocab_size"] = 8192;
  const auto tmp = test::temp_dir();
  test::write_file(tmp / "config.json", cfg.dump());
  auto r = test::run_fak("synth --config " + (tmp / "config.json").string() + " -o " +
                         (tmp / "m").string() + " --layers 4 --dtype f32 --std 0.05 --tokenizer " +
                         test::source_path("models/pycoder-6m").string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return tmp;
}

// Every position's logits for 40 fixed tokens of real_head_layout_model's vocabulary.
std::vector<float> logits_of_40(std::shared_ptr<const Model> m) {
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(int32_t((i * 211 + 7) % 8192));
  auto cache = std::make_shared<KvCache>(m->n_attention_layers(), m->config().n_kv_heads,
                                         m->config().head_dim);
  Session s(m, cache);
  std::vector<float> all;
  s.append(ids, &all);
  return all;
}

// real_head_layout_model loaded from its HF files (hf) and exported as `type` then loaded back (g).
struct Exported {
  std::filesystem::path dir;
  std::shared_ptr<const Model> hf, g;
};
Exported exported_real_head_layout(FileType type, const std::string& name) {
  Exported e{real_head_layout_model(), nullptr, nullptr};
  EXPECT_TRUE(std::filesystem::exists(e.dir / "m" / "config.json"));
  e.hf = Model::load(e.dir / "m");
  export_gguf(*e.hf, type, e.dir / name);
  e.g = Model::load(e.dir / name);
  return e;
}

}  // namespace

// The real 27B's head structure (16 key / 48 value heads of 128) at a tiny width: a q8_0 GGUF,
// whose value heads are stored tiled and moved back block by block, computes exactly what
// quantising the HF weights at load does.
TEST(GgufHybrid, Q8_0AtTheRealHeadLayoutEqualsQuantisingAtLoad) {
  const auto [tmp, hf, g] = exported_real_head_layout(FileType::Q8_0, "q8.gguf");
  auto q = Model::load(tmp / "m", {.quant = QuantType::Q8_0});
  const auto logits = logits_of_40;
  const auto a = logits(g), b = logits(q);
  ASSERT_EQ(a.size(), b.size());
  // Same bytes in every tensor, so the same logits bit for bit.
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

// A K-quant out_proj at the real head layout (128-wide value heads; llama-quantize's Q4_K_M gives
// ssm_out Q4_K, whose 256-element blocks straddle heads): the layer keeps the file's tiled head
// order and computes with the file's own type (it was widened to Q8_0 and reordered), its identity
// says so (state and KV saved by the other layout do not fit), its logits follow the f32 model's,
// and exported again it writes the tiled layout as it holds it (read back: the same logits within
// the rounding of the widened weights).
TEST(GgufHybrid, KQuantOutProjKeepsTheFilesHeadOrder) {
  const auto [tmp, hf, g] = exported_real_head_layout(FileType::Q4_K_M, "q4.gguf");
  int tiled_layers = 0;
  for (const LayerWeights& l : g->weights().layers) {
    if (l.kind == LayerKind::FullAttention) continue;
    EXPECT_TRUE(l.delta.tiled_v_heads);
    EXPECT_EQ(l.delta.out_proj.type, WType::Q4_K);
    ++tiled_layers;
  }
  EXPECT_EQ(tiled_layers, 3);
  EXPECT_NE(g->identity().find("-tiledv"), std::string::npos) << g->identity();
  EXPECT_EQ(hf->identity().find("-tiledv"), std::string::npos) << hf->identity();
  const auto logits = logits_of_40;
  // The logits' correlation with the f32 model's: Q4_K's rounding moves them (on this small random
  // model as much as quantising the HF weights to Q4_K at load does), a head read from the wrong
  // place more.
  const auto corr = [](const std::vector<float>& x, const std::vector<float>& y) {
    double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      sx += x[i];
      sy += y[i];
      sxx += double(x[i]) * x[i];
      syy += double(y[i]) * y[i];
      sxy += double(x[i]) * y[i];
    }
    const double n = double(x.size());
    return (sxy - sx * sy / n) / std::sqrt((sxx - sx * sx / n) * (syy - sy * sy / n));
  };
  const auto want = logits(hf), got = logits(g);
  ASSERT_EQ(want.size(), got.size());
  for (float v : got) ASSERT_TRUE(std::isfinite(v));
  const auto at_load = logits(Model::load(tmp / "m", {.quant = QuantType::Q4_K}));
  const double tiled_corr = corr(want, got), at_load_corr = corr(want, at_load);
  EXPECT_GT(tiled_corr, at_load_corr - 0.03) << tiled_corr << " against " << at_load_corr;
  EXPECT_GT(tiled_corr, 0.85) << tiled_corr;
  // Exported again as f32 (the tiled heads written as held), read back (moved to HF's order, as
  // an f32 file's are): the Q4_K_M model's logits but for its activations' 8-bit rounding.
  export_gguf(*g, FileType::F32, tmp / "again.gguf");
  auto again = Model::load(tmp / "again.gguf");
  EXPECT_FALSE(again->weights().layers[0].delta.tiled_v_heads);
  const double back_corr = corr(got, logits(again));
  EXPECT_GT(back_corr, 0.99) << back_corr;
}

}  // namespace fak
