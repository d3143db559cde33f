#include "models/weights.h"

#include <cmath>
#include <set>

#include "core/error.h"
#include "io/safetensors.h"

namespace fak {

namespace {

class Loader {
 public:
  explicit Loader(const TensorStore& store) : store_(store) {}

  const TensorInfo& tensor(const std::string& name, std::vector<int64_t> shape) {
    const TensorInfo& t = store_.get(name);
    used_.insert(name);
    if (t.shape != shape) {
      TensorInfo want;
      want.shape = shape;
      fail(t.file + ": tensor '" + name + "' has shape " + t.shape_string() + ", expected " +
           want.shape_string() + " from config.json");
    }
    if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16)
      fail(t.file + ": tensor '" + name + "' has dtype " + std::string(dtype_name(t.dtype)) +
           " (supported: F32, BF16, F16)");
    return t;
  }

  WeightMatrix matrix(const std::string& name, int64_t rows, int64_t cols) {
    const TensorInfo& t = tensor(name, {rows, cols});
    WeightMatrix m;
    m.type = t.dtype == DType::F32 ? WType::F32 : t.dtype == DType::BF16 ? WType::BF16 : WType::F16;
    m.data = t.data;
    m.rows = rows;
    m.cols = cols;
    m.row_bytes = wtype_row_bytes(m.type, cols);
    bytes_ += m.bytes();
    return m;
  }

  std::vector<float> vec(const std::string& name, int64_t n, bool plus_one = false) {
    std::vector<float> v = read_f32(tensor(name, {n}));
    if (plus_one)
      for (auto& x : v) x += 1.0f;
    return v;
  }

  std::vector<float> any_shape(const std::string& name, std::vector<int64_t> shape) {
    return read_f32(tensor(name, std::move(shape)));
  }

  bool has(const std::string& name) const { return store_.find(name) != nullptr; }
  size_t bytes() const { return bytes_; }

  // A tensor the config does not explain (an extra layer, a misspelt name) means the config and
  // the weights disagree: refuse rather than silently run a different model.
  void check_all_used(const std::string& prefix) const {
    for (const TensorInfo* t : store_.all()) {
      if (used_.count(t->name)) continue;
      const std::string& n = t->name;
      if (n.find("rotary_emb.inv_freq") != std::string::npos) continue;
      // A multimodal checkpoint's vision tower and MTP head sit beside the language model.
      if (prefix != "model." && n.rfind(prefix, 0) != 0 && n != "lm_head.weight") continue;
      if (n.rfind("mtp.", 0) == 0) continue;  // multi-token-prediction head: not used for decoding
      fail(t->file + ": unexpected tensor '" + n + "' " + t->shape_string() +
           " that config.json does not account for");
    }
  }

 private:
  const TensorStore& store_;
  size_t bytes_ = 0;
  std::set<std::string> used_;
};

}  // namespace

ModelWeights load_hf_weights(const TensorStore& store, const ModelConfig& c,
                             const std::string& prefix) {
  Loader ld(store);
  // The files must hold every layer config.json declares: checked on the last one before anything
  // per layer is built, so a config claiming thousands of layers is refused at once.
  const std::string last_norm =
      prefix + "layers." + std::to_string(c.n_layers - 1) + ".input_layernorm.weight";
  if (!ld.has(last_norm))
    fail(store.source().string() + ": missing tensor '" + last_norm +
         "' (config.json says num_hidden_layers = " + std::to_string(c.n_layers) + ")");
  ModelWeights w;
  w.embed = ld.matrix(prefix + "embed_tokens.weight", c.vocab, c.dim);
  w.final_norm = ld.vec(prefix + "norm.weight", c.dim, c.norm_plus_one);
  // lm_head sits beside the language model ("lm_head.weight") in every layout we accept.
  if (c.tie_embeddings) {
    w.lm_head = w.embed;
  } else {
    if (!ld.has("lm_head.weight"))
      fail(store.source().string() +
           ": missing tensor 'lm_head.weight' (config says tie_word_embeddings is false)");
    w.lm_head = ld.matrix("lm_head.weight", c.vocab, c.dim);
  }
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = prefix + "layers." + std::to_string(i) + ".";
    LayerWeights L;
    L.kind = c.layer_kinds[size_t(i)];
    L.attn_norm = ld.vec(p + "input_layernorm.weight", c.dim, c.norm_plus_one);
    L.mlp_norm = ld.vec(p + "post_attention_layernorm.weight", c.dim, c.norm_plus_one);
    if (L.kind == LayerKind::FullAttention) {
      const std::string a = p + "self_attn.";
      const int64_t q_rows = int64_t(c.q_dim()) * (c.attn_output_gate ? 2 : 1);
      L.attn.wq = ld.matrix(a + "q_proj.weight", q_rows, c.dim);
      L.attn.wk = ld.matrix(a + "k_proj.weight", c.kv_dim(), c.dim);
      L.attn.wv = ld.matrix(a + "v_proj.weight", c.kv_dim(), c.dim);
      L.attn.wo = ld.matrix(a + "o_proj.weight", c.dim, c.q_dim());
      if (c.qkv_bias) {
        L.attn.bq = ld.vec(a + "q_proj.bias", q_rows);
        L.attn.bk = ld.vec(a + "k_proj.bias", c.kv_dim());
        L.attn.bv = ld.vec(a + "v_proj.bias", c.kv_dim());
      }
      if (c.attn_output_bias) L.attn.bo = ld.vec(a + "o_proj.bias", c.dim);
      if (c.qk_norm) {
        L.attn.q_norm = ld.vec(a + "q_norm.weight", c.head_dim, c.norm_plus_one);
        L.attn.k_norm = ld.vec(a + "k_norm.weight", c.head_dim, c.norm_plus_one);
      }
    } else {
      const std::string a = p + "linear_attn.";
      const int64_t key_dim = int64_t(c.linear_num_key_heads) * c.linear_key_head_dim;
      const int64_t value_dim = int64_t(c.linear_num_value_heads) * c.linear_value_head_dim;
      const int64_t conv_dim = 2 * key_dim + value_dim;
      L.delta.in_proj_qkv = ld.matrix(a + "in_proj_qkv.weight", conv_dim, c.dim);
      L.delta.in_proj_z = ld.matrix(a + "in_proj_z.weight", value_dim, c.dim);
      L.delta.in_proj_b = ld.matrix(a + "in_proj_b.weight", c.linear_num_value_heads, c.dim);
      L.delta.in_proj_a = ld.matrix(a + "in_proj_a.weight", c.linear_num_value_heads, c.dim);
      L.delta.out_proj = ld.matrix(a + "out_proj.weight", c.dim, value_dim);
      L.delta.conv1d = ld.any_shape(a + "conv1d.weight", {conv_dim, 1, c.linear_conv_kernel});
      L.delta.dt_bias = ld.vec(a + "dt_bias", c.linear_num_value_heads);
      L.delta.ssm_a = ld.vec(a + "A_log", c.linear_num_value_heads);
      for (float& x : L.delta.ssm_a) x = float(-std::exp(double(x)));
      L.delta.norm = ld.vec(a + "norm.weight", c.linear_value_head_dim);
    }
    const std::string m = p + "mlp.";
    L.mlp.gate = ld.matrix(m + "gate_proj.weight", c.hidden_dim, c.dim);
    L.mlp.up = ld.matrix(m + "up_proj.weight", c.hidden_dim, c.dim);
    L.mlp.down = ld.matrix(m + "down_proj.weight", c.dim, c.hidden_dim);
    if (c.mlp_bias) {
      L.mlp.b_gate = ld.vec(m + "gate_proj.bias", c.hidden_dim);
      L.mlp.b_up = ld.vec(m + "up_proj.bias", c.hidden_dim);
      L.mlp.b_down = ld.vec(m + "down_proj.bias", c.dim);
    }
    w.layers.push_back(std::move(L));
  }
  w.bytes = ld.bytes();
  ld.check_all_used(prefix);
  return w;
}

void pack_weight_panels(ModelWeights& w) {
  const bool tied = w.lm_head.data == w.embed.data;
  auto pack = [](WeightMatrix& m) {
    // note: the caller's promise (weights.h) is what makes writing through this pointer sound.
    if (m.data) pack_weight_panels(m, static_cast<uint8_t*>(const_cast<void*>(m.data)));
  };
  pack(w.embed);
  if (tied)
    w.lm_head = w.embed;
  else
    pack(w.lm_head);
  for (LayerWeights& L : w.layers)
    for (WeightMatrix* m : {&L.attn.wq, &L.attn.wk, &L.attn.wv, &L.attn.wo, &L.delta.in_proj_qkv,
                            &L.delta.in_proj_z, &L.delta.in_proj_b, &L.delta.in_proj_a,
                            &L.delta.out_proj, &L.mlp.gate, &L.mlp.up, &L.mlp.down})
      pack(*m);
}

}  // namespace fak
