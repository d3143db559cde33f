// Table entries of the blocks every family has: the embedding and output head, the per-layer
// norms, attention and the dense SwiGLU MLP.
#include "models/blocks/blocks.h"

namespace fak {

void model_io_tensors(const ModelConfig& c, ModelWeights& w, std::vector<TensorDef>& out) {
  const HfValue norm = c.norm_plus_one ? HfValue::PlusOne : HfValue::AsIs;
  out.push_back(matrix_entry(w.embed, c.vocab, c.dim, "embed_tokens.weight", "token_embd.weight",
                             "token_embd"));
  out.push_back(norm_entry(w.final_norm, c.dim, "norm.weight", "output_norm.weight", norm));
  if (!c.tie_embeddings) {
    // lm_head sits beside the language model ("lm_head.weight") in every layout fak reads.
    TensorDef head =
        matrix_entry(w.lm_head, c.vocab, c.dim, "lm_head.weight", "output.weight", "output");
    head.hf_root = true;
    out.push_back(std::move(head));
  }
}

void layer_norm_tensors(const ModelConfig& c, LayerWeights& L, const LayerNames& n,
                        const char* gguf_post_norm, std::vector<TensorDef>& out) {
  const HfValue norm = c.norm_plus_one ? HfValue::PlusOne : HfValue::AsIs;
  out.push_back(norm_entry(L.attn_norm, c.dim, n.hf + "input_layernorm.weight",
                           n.gguf + "attn_norm.weight", norm));
  if (c.sandwich_norms) {
    // Gemma: post_attention_layernorm norms the attention's output; the MLP's input norm is
    // pre_feedforward_layernorm, and post_feedforward_layernorm norms its output.
    out.push_back(norm_entry(L.post_attn_norm, c.dim, n.hf + "post_attention_layernorm.weight",
                             n.gguf + "post_attention_norm.weight", norm));
    out.push_back(norm_entry(L.mlp_norm, c.dim, n.hf + "pre_feedforward_layernorm.weight",
                             n.gguf + "ffn_norm.weight", norm));
    out.push_back(norm_entry(L.post_mlp_norm, c.dim, n.hf + "post_feedforward_layernorm.weight",
                             n.gguf + "post_ffw_norm.weight", norm));
    return;
  }
  out.push_back(norm_entry(L.mlp_norm, c.dim, n.hf + "post_attention_layernorm.weight",
                           n.gguf + gguf_post_norm + ".weight", norm));
}

void attention_tensors(const ModelConfig& c, AttentionWeights& a, const LayerNames& n,
                       bool rope_pairs, std::vector<TensorDef>& out) {
  const std::string hf = n.hf + "self_attn.";
  // With an output gate q_proj also yields the gate: [query | gate] per head.
  const int64_t q_rows = int64_t(c.q_dim()) * (c.attn_output_gate ? 2 : 1);
  auto paired = [&](TensorDef d) {
    if (rope_pairs) {
      d.gguf_order = GgufOrder::RopePairs;
      d.order_per_head = c.head_dim;
    }
    return d;
  };
  out.push_back(paired(
      matrix_entry(a.wq, q_rows, c.dim, hf + "q_proj.weight", n.gguf + "attn_q.weight", "attn_q")));
  out.push_back(paired(matrix_entry(a.wk, c.kv_dim(), c.dim, hf + "k_proj.weight",
                                    n.gguf + "attn_k.weight", "attn_k")));
  out.push_back(matrix_entry(a.wv, c.kv_dim(), c.dim, hf + "v_proj.weight",
                             n.gguf + "attn_v.weight", "attn_v"));
  out.push_back(matrix_entry(a.wo, c.dim, c.q_dim(), hf + "o_proj.weight",
                             n.gguf + "attn_output.weight", "attn_output"));
  if (c.qkv_bias) {
    out.push_back(paired(vector_entry(a.bq, q_rows, hf + "q_proj.bias", n.gguf + "attn_q.bias")));
    out.push_back(
        paired(vector_entry(a.bk, c.kv_dim(), hf + "k_proj.bias", n.gguf + "attn_k.bias")));
    out.push_back(vector_entry(a.bv, c.kv_dim(), hf + "v_proj.bias", n.gguf + "attn_v.bias"));
  }
  if (c.attn_output_bias)
    out.push_back(vector_entry(a.bo, c.dim, hf + "o_proj.bias", n.gguf + "attn_output.bias"));
  if (c.attn_sinks)
    out.push_back(vector_entry(a.sinks, c.n_heads, hf + "sinks", n.gguf + "attn_sinks.weight"));
  if (c.qk_norm) {
    const HfValue norm = c.norm_plus_one ? HfValue::PlusOne : HfValue::AsIs;
    out.push_back(norm_entry(a.q_norm, c.head_dim, hf + "q_norm.weight",
                             n.gguf + "attn_q_norm.weight", norm));
    out.push_back(norm_entry(a.k_norm, c.head_dim, hf + "k_norm.weight",
                             n.gguf + "attn_k_norm.weight", norm));
  }
}

void mlp_tensors(const ModelConfig& c, MlpWeights& m, const LayerNames& n,
                 std::vector<TensorDef>& out) {
  const std::string hf = n.hf + "mlp.";
  out.push_back(matrix_entry(m.gate, c.hidden_dim, c.dim, hf + "gate_proj.weight",
                             n.gguf + "ffn_gate.weight", "ffn_gate"));
  out.push_back(matrix_entry(m.up, c.hidden_dim, c.dim, hf + "up_proj.weight",
                             n.gguf + "ffn_up.weight", "ffn_up"));
  out.push_back(matrix_entry(m.down, c.dim, c.hidden_dim, hf + "down_proj.weight",
                             n.gguf + "ffn_down.weight", "ffn_down"));
  if (c.mlp_bias) {
    out.push_back(
        vector_entry(m.b_gate, c.hidden_dim, hf + "gate_proj.bias", n.gguf + "ffn_gate.bias"));
    out.push_back(vector_entry(m.b_up, c.hidden_dim, hf + "up_proj.bias", n.gguf + "ffn_up.bias"));
    out.push_back(vector_entry(m.b_down, c.dim, hf + "down_proj.bias", n.gguf + "ffn_down.bias"));
  }
}

void decoder_layer_tensors(const ModelConfig& c, LayerWeights& L, int layer,
                           const LayerStyle& style, std::vector<TensorDef>& out) {
  const LayerNames n(layer);
  layer_norm_tensors(c, L, n, style.gguf_post_norm, out);
  if (L.kind == LayerKind::LinearAttention) {
    deltanet_tensors(c, L.delta, n, out);
  } else {
    attention_tensors(c, L.attn, n, style.rope_pairs, out);
  }
  if (L.ffn == FfnKind::Moe) {
    moe_tensors(c, L.moe, n, style.experts, out);
  } else {
    mlp_tensors(c, L.mlp, n, out);
  }
}

}  // namespace fak
