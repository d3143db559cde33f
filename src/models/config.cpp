#include "models/config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/config_fields.h"
#include "models/family.h"
#include "models/rope.h"

namespace fak {

using nlohmann::json;

std::string number_text(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

void check_derived_sizes(const ModelConfig& c, const std::string& label) {
  auto at_most = [&](int64_t v, int64_t max, const std::string& what) {
    if (v > max)
      fail(label + ": " + what + " = " + std::to_string(v) + " exceeds the limit of " +
           std::to_string(max));
  };
  // q_dim() and kv_dim() are ints; kv_dim <= q_dim since n_kv_heads divides n_heads.
  at_most(int64_t(c.n_heads) * c.head_dim, kMaxWidth, "attention heads x head_dim");
  if (c.is_hybrid()) {
    at_most(int64_t(c.linear_num_key_heads) * c.linear_key_head_dim, kMaxWidth,
            "linear-attention key heads x key head dim");
    at_most(int64_t(c.linear_num_value_heads) * c.linear_value_head_dim, kMaxWidth,
            "linear-attention value heads x value head dim");
    // Each session allocates this recurrent state from the config alone (not from a tensor the
    // file must hold), so it gets a bound of its own: 256 MiB of f32, ~85x Qwen3.6-27B's.
    at_most(int64_t(c.linear_num_value_heads) * c.linear_key_head_dim * c.linear_value_head_dim,
            int64_t(1) << 26, "recurrent state per sequence (value heads x key dim x value dim)");
  }
  if (c.is_moe()) {
    if (c.n_experts_used > c.n_experts)
      fail(label + ": experts per token (" + std::to_string(c.n_experts_used) +
           ") exceeds the number of experts (" + std::to_string(c.n_experts) + ")");
    // One entry per layer and expert is made before any tensor is read: bounded here, far above
    // Qwen3.5-397B-A17B's 60 x 512.
    at_most(int64_t(c.n_layers) * c.n_experts, int64_t(1) << 18, "layers x experts");
  }
}

RecurrentShape ModelConfig::recurrent_shape() const {
  RecurrentShape shape;
  if (!is_hybrid()) return shape;
  const size_t key_dim = size_t(linear_num_key_heads) * size_t(linear_key_head_dim);
  const size_t value_dim = size_t(linear_num_value_heads) * size_t(linear_value_head_dim);
  shape.conv_floats = (2 * key_dim + value_dim) * size_t(linear_conv_kernel - 1);
  shape.ssm_floats =
      size_t(linear_num_value_heads) * size_t(linear_key_head_dim) * size_t(linear_value_head_dim);
  for (int l = 0; l < n_layers; ++l)
    shape.linear_layers.push_back(layers[size_t(l)].mixer == LayerKind::LinearAttention);
  return shape;
}

int ModelConfig::max_window() const {
  int w = 0;
  for (const LayerSlot& s : layers) w = std::max(w, s.window);
  return w;
}

int ModelConfig::count_mixers(LayerKind kind) const {
  return int(std::count_if(layers.begin(), layers.end(),
                           [&](const LayerSlot& s) { return s.mixer == kind; }));
}

int ModelConfig::count_ffns(FfnKind kind) const {
  return int(std::count_if(layers.begin(), layers.end(),
                           [&](const LayerSlot& s) { return s.ffn == kind; }));
}

LayerSpec ModelConfig::layer_spec(int layer) const {
  check(layer >= -1 && layer < int(layers.size()), "layer_spec: no layer " + std::to_string(layer));
  // The MTP head's layer: full attention over every position, the model's RoPE, the model's FFN.
  const LayerSlot slot =
      layer >= 0 ? layers[size_t(layer)]
                 : LayerSlot{LayerKind::FullAttention, is_moe() ? FfnKind::Moe : FfnKind::Dense, 0};
  LayerSpec s;
  s.mixer = slot.mixer;
  AttentionLayerSpec& a = s.attention;
  a.window = slot.window;
  a.rope_table = rope_table(layer);
  a.scale = attn_scale > 0 ? attn_scale : float(1.0 / std::sqrt(double(head_dim)));
  a.qk_norm = qk_norm;
  a.output_gate = attn_output_gate;
  a.sinks = attn_sinks;
  FfnSpec& f = s.ffn;
  f.kind = slot.ffn;
  f.act = mlp_act;
  f.router = router;
  f.n_experts = n_experts;
  f.k = n_experts_used;
  f.renorm = norm_topk_prob;
  f.groups = n_expert_groups;
  f.groups_used = n_groups_used;
  f.routed_scale = routed_scaling;
  f.expert_act = expert_act;
  f.clamp_alpha = swiglu_alpha;
  f.clamp_limit = swiglu_limit;
  f.expert_biases = moe_bias;
  f.shared_hidden = shared_expert_hidden_dim;
  f.shared_gated = shared_expert_gated;
  s.norms.sandwich = sandwich_norms;
  s.norms.plus_one = norm_plus_one;
  return s;
}

std::string ModelConfig::family_name() const {
  return family ? std::string(family->name()) : "?";
}

int json_int(const json& j, const char* key, int max, const std::string& label) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) fail(label + ": missing '" + key + "'");
  if (!it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > max)
    fail(label + ": '" + key + "' must be a positive integer (at most " + std::to_string(max) +
         "), got " + it->dump());
  return int(it->get<int64_t>());
}

int json_int_or(const json& j, const char* key, int fallback, int max, const std::string& label) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return json_int(j, key, max, label);
}

double json_number_or(const json& j, const char* key, double fallback, const std::string& label) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) fail(label + ": '" + key + "' must be a number, got " + it->dump());
  return it->get<double>();
}

void require_number(bool ok, const std::string& label, const std::string& key, const char* rule,
                    double value) {
  if (!ok) fail(label + ": '" + key + "' must be " + rule + ", got " + number_text(value));
}

bool json_bool_or(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_boolean()) return fallback;
  return it->get<bool>();
}

int gguf_positive(const GgufFile& f, const std::string& key, int max) {
  const uint64_t v = f.get_u64(key);
  if (v == 0 || v > uint64_t(max))
    fail(f.name() + ": " + key + " must be a positive integer (at most " + std::to_string(max) +
         "), got " + std::to_string(v));
  return int(v);
}

int gguf_positive_or(const GgufFile& f, const std::string& key, int fallback, int max) {
  return f.find(key) ? gguf_positive(f, key, max) : fallback;
}

namespace {

// HF _compute_yarn_parameters (transformers main): every key optional but factor, each checked
// here so a bad one is named rather than turned into NaN frequencies.
void parse_yarn(const json& s, ModelConfig* c, const std::string& label) {
  c->rope_scaling = RopeScaling::Yarn;
  // note: transformers falls back to the config's max_position_embeddings for the trained length
  // (its standardize step copies it in), and derives a missing factor as max_position_embeddings
  // / original_max_position_embeddings. Older releases (4.5x) overrode an explicit factor with
  // that ratio whenever original_max_position_embeddings was given; main no longer does.
  c->rope_original_max_pos =
      json_int_or(s, "original_max_position_embeddings", c->max_seq_len, kMaxSeqLen, label);
  c->rope_factor =
      json_number_or(s, "factor", double(c->max_seq_len) / c->rope_original_max_pos, label);
  // Frequencies are divided by it and its logarithm sets the attention factor.
  require_number(std::isfinite(c->rope_factor) && c->rope_factor > 0, label, "factor",
                 "finite and > 0", c->rope_factor);
  c->rope_yarn_beta_fast = json_number_or(s, "beta_fast", 32.0, label);
  c->rope_yarn_beta_slow = json_number_or(s, "beta_slow", 1.0, label);
  // Each is a count of rotations over the trained context, inside a logarithm; fast (the high
  // frequencies kept as they are) must not be below slow or the ramp runs backwards.
  require_number(std::isfinite(c->rope_yarn_beta_slow) && c->rope_yarn_beta_slow > 0, label,
                 "beta_slow", "finite and > 0", c->rope_yarn_beta_slow);
  require_number(
      std::isfinite(c->rope_yarn_beta_fast) && c->rope_yarn_beta_fast >= c->rope_yarn_beta_slow,
      label, "beta_fast", "finite and >= beta_slow", c->rope_yarn_beta_fast);
  if (auto it = s.find("truncate"); it != s.end() && !it->is_null()) {
    if (!it->is_boolean()) fail(label + ": 'truncate' must be true or false, got " + it->dump());
    c->rope_yarn_truncate = it->get<bool>();
  }
  const double attention = json_number_or(s, "attention_factor", 0.0, label);
  const double mscale = json_number_or(s, "mscale", 0.0, label);
  const double mscale_all_dim = json_number_or(s, "mscale_all_dim", 0.0, label);
  require_number(std::isfinite(mscale), label, "mscale", "finite", mscale);
  require_number(std::isfinite(mscale_all_dim), label, "mscale_all_dim", "finite", mscale_all_dim);
  if (s.contains("attention_factor") && !s["attention_factor"].is_null()) {
    // It scales every query and key: 0 or less would erase or flip attention.
    require_number(std::isfinite(attention) && attention > 0, label, "attention_factor",
                   "finite and > 0", attention);
    c->rope_attention_factor = attention;
  } else if (mscale != 0 && mscale_all_dim != 0) {
    // DeepSeek style: HF tests both for truthiness, so a 0 (or absent) one means "unset".
    c->rope_attention_factor =
        yarn_mscale(c->rope_factor, mscale) / yarn_mscale(c->rope_factor, mscale_all_dim);
    require_number(std::isfinite(c->rope_attention_factor) && c->rope_attention_factor > 0, label,
                   "mscale", "such that the attention factor is finite and > 0",
                   c->rope_attention_factor);
  } else {
    c->rope_attention_factor = yarn_mscale(c->rope_factor, 1.0);
  }
}

void parse_rope(const json& j, ModelConfig* c, const std::string& label) {
  // rope_theta lives at the top level (older configs) or inside rope_parameters (newer ones);
  // scaling in rope_scaling (older) or rope_parameters (newer).
  const json* params = nullptr;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object())
    params = &j["rope_parameters"];
  c->rope_theta = json_number_or(j, "rope_theta", 10000.0, label);
  if (params) c->rope_theta = json_number_or(*params, "rope_theta", c->rope_theta, label);
  require_number(std::isfinite(c->rope_theta) && c->rope_theta > 0, label, "rope_theta",
                 "finite and > 0", c->rope_theta);
  double partial = json_number_or(j, "partial_rotary_factor", 1.0, label);
  if (params) partial = json_number_or(*params, "partial_rotary_factor", partial, label);
  require_number(partial > 0 && partial <= 1, label, "partial_rotary_factor", "> 0 and <= 1",
                 partial);
  c->rotary_dim = int(c->head_dim * partial);
  if (c->rotary_dim <= 0 || c->rotary_dim % 2 != 0 || c->rotary_dim > c->head_dim)
    fail(label + ": partial_rotary_factor gives an invalid rotary dimension");

  const json* scaling = nullptr;
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) scaling = &j["rope_scaling"];
  if (!scaling && params) scaling = params;
  if (!scaling) return;
  std::string type = "default";
  if (scaling->contains("rope_type") && (*scaling)["rope_type"].is_string())
    type = (*scaling)["rope_type"].get<std::string>();
  else if (scaling->contains("type") && (*scaling)["type"].is_string())
    type = (*scaling)["type"].get<std::string>();
  if (type == "default") return;
  if (type == "yarn") return parse_yarn(*scaling, c, label);
  c->rope_factor = json_number_or(*scaling, "factor", 1.0, label);
  // Every frequency is divided by it.
  require_number(std::isfinite(c->rope_factor) && c->rope_factor > 0, label, "factor",
                 "finite and > 0", c->rope_factor);
  if (type == "linear") {
    c->rope_scaling = RopeScaling::Linear;
  } else if (type == "llama3") {
    c->rope_scaling = RopeScaling::Llama3;
    c->rope_low_freq_factor = json_number_or(*scaling, "low_freq_factor", 1.0, label);
    c->rope_high_freq_factor = json_number_or(*scaling, "high_freq_factor", 4.0, label);
    // The smoothing divides by high - low and the wavelengths by each.
    require_number(std::isfinite(c->rope_low_freq_factor) && c->rope_low_freq_factor > 0, label,
                   "low_freq_factor", "finite and > 0", c->rope_low_freq_factor);
    require_number(std::isfinite(c->rope_high_freq_factor) &&
                       c->rope_high_freq_factor > c->rope_low_freq_factor,
                   label, "high_freq_factor", "finite and > low_freq_factor",
                   c->rope_high_freq_factor);
    c->rope_original_max_pos =
        json_int_or(*scaling, "original_max_position_embeddings", 8192, kMaxSeqLen, label);
  } else {
    fail(label + ": rope type '" + type +
         "' is not supported (supported: default, linear, llama3, yarn)");
  }
}

// bos_token_id / eos_token_id: null, one id or a list of ids, each inside the vocabulary (an id
// past it would index the embedding out of bounds, or never match a sampled token).
std::vector<int32_t> parse_token_ids(const json& j, const char* key, int vocab,
                                     const std::string& label) {
  std::vector<int32_t> ids;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return ids;
  const bool list = it->is_array();
  for (const json& e : list ? *it : json::array({*it})) {
    if (!e.is_number_integer())
      fail(label + ": '" + key + "' must be a token id or a list of them, got " + it->dump());
    if (e.get<int64_t>() < 0 || e.get<int64_t>() >= vocab)
      fail(label + ": '" + key + "' " + e.dump() + " is outside the vocabulary (vocab_size " +
           std::to_string(vocab) + ")");
    ids.push_back(int32_t(e.get<int64_t>()));
  }
  return ids;
}

}  // namespace

ModelConfig parse_hf_config(const json& root, const std::string& label) {
  if (!root.is_object()) fail(label + ": config is not a JSON object");
  const json* jp = &root;
  // Multimodal checkpoints (Qwen3.5, Qwen3.5 MoE) nest the language model's config under
  // text_config.
  if (root.contains("text_config") && root["text_config"].is_object() &&
      !root.contains("hidden_size"))
    jp = &root["text_config"];
  if (!jp->contains("model_type") || !(*jp)["model_type"].is_string())
    fail(label + ": missing 'model_type'");
  ModelConfig c;
  c.model_type = (*jp)["model_type"].get<std::string>();
  c.family = &family_for_hf(c.model_type, label);
  // Keys the file leaves out take transformers' class defaults; a nested text_config also takes
  // the token ids its parent gives (Gemma 3's root eos_token_id [1, 106]).
  json merged = c.family->hf_defaults();
  if (jp != &root)
    for (const char* key : {"bos_token_id", "eos_token_id", "tie_word_embeddings"})
      if (root.contains(key) && !root[key].is_null()) merged[key] = root[key];
  for (const auto& [key, value] : jp->items())
    if (!value.is_null() || !merged.contains(key)) merged[key] = value;
  const json& j = merged;
  c.dim = json_int(j, "hidden_size", kMaxWidth, label);
  c.n_layers = json_int(j, "num_hidden_layers", kMaxLayers, label);
  c.n_heads = json_int(j, "num_attention_heads", kMaxWidth, label);
  c.n_kv_heads = json_int_or(j, "num_key_value_heads", c.n_heads, kMaxWidth, label);
  c.vocab = json_int(j, "vocab_size", kMaxWidth, label);
  if ((!j.contains("head_dim") || j["head_dim"].is_null()) && c.dim < c.n_heads)
    fail(label + ": num_attention_heads (" + std::to_string(c.n_heads) + ") exceeds hidden_size (" +
         std::to_string(c.dim) + ") and there is no 'head_dim'");
  c.head_dim = json_int_or(j, "head_dim", c.dim / c.n_heads, kMaxWidth, label);
  c.max_seq_len = json_int_or(j, "max_position_embeddings", 4096, kMaxSeqLen, label);
  const double eps = json_number_or(j, "rms_norm_eps", 1e-6, label);
  // Added under the square root of a mean square: 0 divides by zero on a zero row, >= 1 swamps it.
  require_number(eps > 0 && eps < 1, label, "rms_norm_eps", "> 0 and < 1", eps);
  c.rms_eps = float(eps);
  if (c.n_heads % c.n_kv_heads != 0)
    fail(label + ": num_attention_heads (" + std::to_string(c.n_heads) +
         ") is not a multiple of num_key_value_heads (" + std::to_string(c.n_kv_heads) + ")");
  if (c.head_dim % 2 != 0) fail(label + ": head_dim must be even");
  std::string act = "silu";
  if (j.contains("hidden_act")) {
    if (!j["hidden_act"].is_string()) fail(label + ": hidden_act must be a string");
    act = j["hidden_act"].get<std::string>();
  }
  if (act != "silu") fail(label + ": hidden_act '" + act + "' is not supported (only silu)");
  // HF's default for every family but Gemma's.
  c.tie_embeddings = json_bool_or(j, "tie_word_embeddings", false);

  c.layers.assign(size_t(c.n_layers), LayerSlot{});
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    const json& lt = j["layer_types"];
    if (lt.size() != size_t(c.n_layers))
      fail(label + ": layer_types has " + std::to_string(lt.size()) + " entries for " +
           std::to_string(c.n_layers) + " layers");
    for (size_t i = 0; i < lt.size(); ++i) {
      std::string kind = lt[i].is_string() ? lt[i].get<std::string>() : "";
      if (kind == "full_attention") {
        c.layers[i].mixer = LayerKind::FullAttention;
      } else if (kind == "linear_attention") {
        c.layers[i].mixer = LayerKind::LinearAttention;
      } else if (kind == "sliding_attention") {
        // Attention over the last sliding_window positions (Gemma 3's local layers).
        const int window = json_int_or(j, "sliding_window", 0, kMaxSeqLen, label);
        if (window < 1) fail(label + ": layer_types has sliding_attention but no sliding_window");
        c.layers[i].mixer = LayerKind::FullAttention;
        c.layers[i].window = window;
      } else {
        fail(label + ": layer_types[" + std::to_string(i) + "] '" + kind + "' is not supported");
      }
    }
  }
  if (json_bool_or(j, "use_sliding_window", false))
    fail(label + ": use_sliding_window is set; sliding-window attention is not supported");

  c.family->read_hf(j, c, label);
  // Quantised checkpoints: only gpt-oss's MXFP4 experts are read as stored (models/weights.cpp);
  // any other scheme's tensors would not load as the weights they stand for.
  if (auto q = j.find("quantization_config"); q != j.end() && !q->is_null()) {
    const std::string method =
        q->is_object() && q->contains("quant_method") && (*q)["quant_method"].is_string()
            ? (*q)["quant_method"].get<std::string>()
            : "?";
    if (method != "mxfp4" || c.family_name() != "gpt_oss")
      fail(label + ": quantization_config quant_method '" + method + "' is not supported for " +
           c.family_name() +
           " (fak reads unquantised checkpoints, and gpt-oss's MXFP4 experts; for others, convert "
           "the unquantised weights with fak convert)");
  }
  // A dense model's MLP width; MoE families whose every layer is sparse may leave it out.
  const bool any_dense = c.count_ffns(FfnKind::Dense) > 0;
  c.hidden_dim = any_dense ? json_int(j, "intermediate_size", kMaxWidth, label)
                           : json_int_or(j, "intermediate_size", 0, kMaxWidth, label);
  for (int i = 0; i < c.n_layers; ++i)
    if (c.layers[size_t(i)].mixer == LayerKind::LinearAttention && !c.is_hybrid())
      fail(label + ": layer_types[" + std::to_string(i) +
           "] 'linear_attention' is not supported by " + c.family_name());
  check_derived_sizes(c, label);
  parse_rope(j, &c, label);

  if (auto ids = parse_token_ids(j, "bos_token_id", c.vocab, label); !ids.empty())
    c.bos_id = ids[0];
  c.eos_ids = parse_token_ids(j, "eos_token_id", c.vocab, label);
  return c;
}

ModelConfig load_hf_config(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) fail("cannot open " + path.string());
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail(path.string() + ": not valid JSON: " + e.what());
  }
  ModelConfig c = parse_hf_config(j, path.string());
  // generate() stops on generation_config.json's eos_token_id, which instruct checkpoints extend
  // past config.json's (Qwen2.5's <|im_end|> beside <|endoftext|>): fak stops on both lists.
  const auto generation = path.parent_path() / "generation_config.json";
  std::error_code ec;
  if (path.filename() == "config.json" && std::filesystem::is_regular_file(generation, ec)) {
    std::ifstream gin(generation);
    const json g = json::parse(gin, nullptr, false);
    if (!g.is_object()) fail(generation.string() + ": not a JSON object");
    for (int32_t id : parse_token_ids(g, "eos_token_id", c.vocab, generation.string()))
      if (std::find(c.eos_ids.begin(), c.eos_ids.end(), id) == c.eos_ids.end())
        c.eos_ids.push_back(id);
  }
  return c;
}

}  // namespace fak
