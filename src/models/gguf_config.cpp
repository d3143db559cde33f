// GGUF metadata -> ModelConfig: the keys every llama.cpp architecture shares ("<arch>.block_count",
// "<arch>.embedding_length", attention heads, RoPE, the vocabulary's special ids), then the
// family's own (family.h). Tensor presence decides biases, q/k norms and tied embeddings, as in
// llama.cpp.
#include <cmath>
#include <initializer_list>

#include "core/error.h"
#include "models/config_fields.h"
#include "models/family.h"
#include "models/gguf_loader.h"
#include "models/rope.h"

namespace fak {

namespace {

// The YaRN keys llama.cpp's converter writes (convert_hf_to_gguf.py, gguf-py's Keys.Rope), read
// with HF's meaning so a converted HF model runs as it did (models/config.cpp parse_yarn).
void read_yarn(const GgufFile& f, const std::string& p, ModelConfig* c) {
  auto require = [&](bool ok, const std::string& key, const char* rule, double v) {
    if (!ok) fail(f.name() + ": " + key + " must be " + rule + ", got " + number_text(v));
  };
  // As llama.cpp (n_ctx_orig_yarn) and HF: the trained context unless said otherwise.
  c->rope_original_max_pos =
      gguf_positive_or(f, p + "rope.scaling.original_context_length", c->max_seq_len, kMaxSeqLen);
  const std::string fast_key = p + "rope.scaling.yarn_beta_fast";
  const std::string slow_key = p + "rope.scaling.yarn_beta_slow";
  c->rope_yarn_beta_fast = f.get_f32_or(fast_key, 32.0f);
  c->rope_yarn_beta_slow = f.get_f32_or(slow_key, 1.0f);
  require(std::isfinite(c->rope_yarn_beta_slow) && c->rope_yarn_beta_slow > 0, slow_key,
          "finite and > 0", c->rope_yarn_beta_slow);
  require(std::isfinite(c->rope_yarn_beta_fast) && c->rope_yarn_beta_fast >= c->rope_yarn_beta_slow,
          fast_key, "finite and >= yarn_beta_slow", c->rope_yarn_beta_fast);
  // fak's own key (gguf_export.cpp): HF's truncate: false, which llama.cpp has no key for.
  if (f.find(p + "rope.scaling.yarn_truncate"))
    c->rope_yarn_truncate = f.get_bool(p + "rope.scaling.yarn_truncate");
  const std::string attn_key = p + "rope.scaling.yarn_attn_factor";
  const std::string log_mul_key = p + "rope.scaling.yarn_log_multiplier";
  if (f.find(attn_key)) {
    // The converter writes HF's attention_factor here; HF uses it in place of the default.
    c->rope_attention_factor = f.get_f32(attn_key);
    require(std::isfinite(c->rope_attention_factor) && c->rope_attention_factor > 0, attn_key,
            "finite and > 0", c->rope_attention_factor);
  } else if (f.find(log_mul_key)) {
    // llama.cpp (llama-context.cpp) reads it as mscale_all_dim with mscale 1.
    const double log_mul = f.get_f32(log_mul_key);
    require(std::isfinite(log_mul), log_mul_key, "finite", log_mul);
    c->rope_attention_factor =
        log_mul == 0 ? yarn_mscale(c->rope_factor, 1.0)
                     : yarn_mscale(c->rope_factor, 1.0) / yarn_mscale(c->rope_factor, log_mul);
    require(std::isfinite(c->rope_attention_factor) && c->rope_attention_factor > 0, log_mul_key,
            "such that the attention factor is finite and > 0", c->rope_attention_factor);
  } else {
    c->rope_attention_factor = yarn_mscale(c->rope_factor, 1.0);
  }
  // llama.cpp multiplies whatever it computed by this one (hparams.rope_attn_factor, default 1).
  const std::string extra_key = p + "rope.scaling.attn_factor";
  if (f.find(extra_key)) {
    const double extra = f.get_f32(extra_key);
    require(std::isfinite(extra) && extra > 0, extra_key, "finite and > 0", extra);
    c->rope_attention_factor *= extra;
  }
}

}  // namespace

ModelConfig gguf_model_config(const GgufFile& f) {
  const std::string arch = f.get_string("general.architecture");
  ModelConfig c;
  c.model_type = arch;
  c.family = &family_for_gguf(arch, f.name());
  const std::string p = arch + ".";
  auto positive = [&](const std::string& key, int max = kMaxWidth) {
    return gguf_positive(f, key, max);
  };
  // note: written so that NaN fails `ok`.
  auto require = [&](bool ok, const std::string& key, const char* rule, double v) {
    if (!ok) fail(f.name() + ": " + key + " must be " + rule + ", got " + number_text(v));
  };
  c.dim = positive(p + "embedding_length");
  c.n_layers = positive(p + "block_count", kMaxLayers);
  c.n_heads = positive(p + "attention.head_count");
  c.n_kv_heads = gguf_positive_or(f, p + "attention.head_count_kv", c.n_heads, kMaxWidth);
  if (!f.find(p + "attention.key_length") && c.dim < c.n_heads)
    fail(f.name() + ": " + p + "attention.head_count (" + std::to_string(c.n_heads) +
         ") exceeds embedding_length (" + std::to_string(c.dim) + ") and there is no key_length");
  c.head_dim = gguf_positive_or(f, p + "attention.key_length", c.dim / c.n_heads, kMaxWidth);
  if (f.find(p + "attention.value_length") && positive(p + "attention.value_length") != c.head_dim)
    fail(f.name() + ": attention.value_length differs from key_length (not supported)");
  if (c.n_heads % c.n_kv_heads != 0)
    fail(f.name() + ": attention.head_count is not a multiple of attention.head_count_kv");
  if (c.head_dim % 2 != 0) fail(f.name() + ": attention.key_length must be even");
  c.max_seq_len = gguf_positive_or(f, p + "context_length", 4096, kMaxSeqLen);
  c.rms_eps = f.get_f32_or(p + "attention.layer_norm_rms_epsilon", 1e-6f);
  // Added under the square root of a mean square: 0 divides by zero on a zero row, >= 1 swamps it.
  require(c.rms_eps > 0 && c.rms_eps < 1, p + "attention.layer_norm_rms_epsilon", "> 0 and < 1",
          c.rms_eps);
  c.rope_theta = f.get_f32_or(p + "rope.freq_base", 10000.0f);
  require(std::isfinite(c.rope_theta) && c.rope_theta > 0, p + "rope.freq_base", "finite and > 0",
          c.rope_theta);
  c.rotary_dim = gguf_positive_or(f, p + "rope.dimension_count", c.head_dim, kMaxWidth);
  if (c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0)
    fail(f.name() + ": rope.dimension_count must be even and at most key_length");
  std::string scaling = "none";
  if (f.find(p + "rope.scaling.type")) scaling = f.get_string(p + "rope.scaling.type");
  std::string factor_key;
  if (scaling == "linear") {
    c.rope_scaling = RopeScaling::Linear;
    factor_key = p + "rope.scaling.factor";
  } else if (scaling == "yarn") {
    c.rope_scaling = RopeScaling::Yarn;
    factor_key = p + "rope.scaling.factor";
  } else if (scaling != "none") {
    fail(f.name() + ": rope.scaling.type '" + scaling + "' is not supported (none, linear, yarn)");
  } else if (f.find(p + "rope.scale_linear")) {  // older files
    c.rope_scaling = RopeScaling::Linear;
    factor_key = p + "rope.scale_linear";
  }
  if (!factor_key.empty()) {
    c.rope_factor = f.get_f32(factor_key);
    // Every frequency is divided by it.
    require(std::isfinite(c.rope_factor) && c.rope_factor > 0, factor_key, "finite and > 0",
            c.rope_factor);
  }
  if (c.rope_scaling == RopeScaling::Yarn) read_yarn(f, p, &c);
  if (f.tensor("rope_freqs.weight"))
    fail(f.name() +
         ": per-frequency rope factors (rope_freqs, Llama-3.1 style scaling) are not "
         "supported yet");

  const GgufTensor* embd = f.tensor("token_embd.weight");
  if (!embd || embd->dims.size() != 2) fail(f.name() + ": missing 2-D tensor 'token_embd.weight'");
  if (embd->dims[1] <= 0 || embd->dims[1] > kMaxWidth)
    fail(f.name() + ": tensor 'token_embd.weight' has " + std::to_string(embd->dims[1]) +
         " rows; the vocabulary must be 1 to " + std::to_string(kMaxWidth) + " tokens");
  c.vocab = int(embd->dims[1]);
  c.tie_embeddings = f.tensor("output.weight") == nullptr;
  // Any one of a group of biases means the model has them all: a missing one is then named as
  // missing, rather than its siblings reported as unexpected.
  auto any = [&f](std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (f.tensor(n)) return true;
    return false;
  };
  c.qkv_bias = any({"blk.0.attn_q.bias", "blk.0.attn_k.bias", "blk.0.attn_v.bias"});
  c.attn_output_bias = any({"blk.0.attn_output.bias"});
  c.mlp_bias = any({"blk.0.ffn_gate.bias", "blk.0.ffn_up.bias", "blk.0.ffn_down.bias"});
  c.qk_norm = any({"blk.0.attn_q_norm.weight", "blk.0.attn_k_norm.weight"});
  // block_count includes multi-token-prediction (NextN) blocks after the decoder.
  if (f.find(p + "nextn_predict_layers")) {
    const uint64_t nextn = f.get_u64(p + "nextn_predict_layers");
    if (nextn >= uint64_t(c.n_layers))
      fail(f.name() + ": " + p + "nextn_predict_layers must be below block_count");
    c.n_layers -= int(nextn);
    c.mtp_layers = int(nextn);
  }
  // The file must hold every layer it declares: checked on the last one before anything per
  // layer is built, so a small file claiming thousands of layers is refused at once.
  const std::string last_norm = "blk." + std::to_string(c.n_layers - 1) + ".attn_norm.weight";
  if (!f.tensor(last_norm))
    fail(f.name() + ": missing tensor '" + last_norm + "' (" + p + "block_count says " +
         std::to_string(c.n_layers) + " layers)");
  c.layers.assign(size_t(c.n_layers), LayerSlot{});
  c.family->read_gguf(f, p, c);
  // fak runs the MTP head of the Qwen3.5 hybrids; another family's NextN blocks, and blocks
  // without the head's own projection, are left unread.
  if (!c.is_hybrid() || !f.tensor("blk." + std::to_string(c.n_layers) + ".nextn.eh_proj.weight"))
    c.mtp_layers = 0;
  const bool any_dense = c.count_ffns(FfnKind::Dense) > 0;
  if (any_dense || f.find(p + "feed_forward_length"))
    c.hidden_dim = positive(p + "feed_forward_length");

  check_derived_sizes(c, f.name());
  // bos/eos ids must name a token of the file: of its token list when it has one (llama.cpp's
  // n_vocab; in a real GGUF the embedding has exactly as many rows), else of the embedding. An id
  // past the embedding's rows is then harmless: it is never sampled, and a prompt holding it is
  // refused by Session::append.
  const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  const int64_t vocab =
      tokens && tokens->type == GgufType::ARRAY ? int64_t(tokens->array.size()) : int64_t(c.vocab);
  auto token_id = [&](const char* key) {
    const int64_t id = f.get_i64(key);
    if (id < 0 || id >= vocab)
      fail(f.name() + ": " + key + " " + std::to_string(id) + " is outside the vocabulary (" +
           std::to_string(vocab) + " tokens)");
    return int32_t(id);
  };
  if (f.find("tokenizer.ggml.bos_token_id")) c.bos_id = token_id("tokenizer.ggml.bos_token_id");
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"})
    if (f.find(key)) c.eos_ids.push_back(token_id(key));
  return c;
}

}  // namespace fak
