// Table entries of the Qwen3.5 / 3.6 multi-token-prediction head (runtime/mtp_draft.h). In a
// Hugging Face checkpoint it sits at the root, beside the language model ("mtp.fc.weight",
// "mtp.layers.0.self_attn.q_proj.weight"); llama.cpp's converter writes it as one more block after
// the decoder's ("blk.N.nextn.eh_proj.weight", "blk.N.attn_q.weight") with
// <arch>.nextn_predict_layers = 1 and block_count counting it.
#include "models/blocks/blocks.h"

namespace fak {

void mtp_tensors(const ModelConfig& c, ModelWeights& w, const LayerStyle& style,
                 std::vector<TensorDef>& out) {
  const HfValue norm = c.norm_plus_one ? HfValue::PlusOne : HfValue::AsIs;
  const std::string blk = "blk." + std::to_string(c.n_layers) + ".nextn.";
  auto root = [](TensorDef d) {
    d.hf_root = true;
    return d;
  };
  MtpWeights& m = w.mtp;
  out.push_back(root(matrix_entry(m.fc, c.dim, 2 * int64_t(c.dim), "mtp.fc.weight",
                                  blk + "eh_proj.weight", "nextn_eh_proj")));
  out.push_back(root(norm_entry(m.norm_embedding, c.dim, "mtp.pre_fc_norm_embedding.weight",
                                blk + "enorm.weight", norm)));
  out.push_back(root(norm_entry(m.norm_hidden, c.dim, "mtp.pre_fc_norm_hidden.weight",
                                blk + "hnorm.weight", norm)));
  out.push_back(root(
      norm_entry(m.final_norm, c.dim, "mtp.norm.weight", blk + "shared_head_norm.weight", norm)));
  // Its decoder layer: the entries of a layer numbered n_layers (GGUF "blk.N."), renamed under
  // "mtp.layers.0." for Hugging Face.
  std::vector<TensorDef> layer;
  decoder_layer_tensors(c, m.layer, c.n_layers, style, layer);
  const std::string from = LayerNames(c.n_layers).hf, to = "mtp.layers.0.";
  for (TensorDef& d : layer) {
    for (std::string* name : {&d.hf, &d.hf_alt})
      if (name->rfind(from, 0) == 0) *name = to + name->substr(from.size());
    out.push_back(root(std::move(d)));
  }
}

}  // namespace fak
