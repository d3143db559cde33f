// A model family: what one architecture adds to the config every family shares, and the one list
// of its tensors. Each family is one file under src/models/families/ plus one line in
// registry.cpp; loading (Hugging Face or GGUF), writing GGUF, quantising, packing, copying to a
// device, counting bytes and `fak synth` all walk the family's tensor list (tensor_table.h), and
// the forward (forward.cpp) reads the normalised config, so a new family touches nothing else
// unless it brings a new kind of block.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "models/config.h"

namespace fak {

class GgufFile;
class GgufWriter;
struct ModelWeights;
struct TensorDef;

class Family {
 public:
  virtual ~Family() = default;
  // fak's name for the family, also the HF model_type fak writes ("qwen3_moe").
  virtual std::string_view name() const = 0;
  // config.json model_type values this family reads (e.g. "qwen3_5" and "qwen3_5_text").
  virtual std::vector<std::string_view> hf_model_types() const = 0;
  // llama.cpp's general.architecture ("qwen3moe").
  virtual std::string_view gguf_arch() const = 0;

  // The values transformers' config class gives keys a config.json leaves out, where they differ
  // from fak's common fallbacks. Published multimodal checkpoints (Gemma 3 4B-27B) write only the
  // text_config keys that differ from the class's, leaving heads, vocabulary and the rest to it.
  virtual nlohmann::json hf_defaults() const;

  // The family's part of config.json, after the common fields (dims, heads, RoPE, vocabulary,
  // tied embeddings) are read; sets flags (qkv_bias, qk_norm, ...), layer kinds and block sizes.
  virtual void read_hf(const nlohmann::json& j, ModelConfig& c, const std::string& label) const = 0;
  // The same from GGUF metadata (keys prefixed `p` = "<arch>."), after the common ones.
  virtual void read_gguf(const GgufFile& f, const std::string& p, ModelConfig& c) const = 0;
  // The family's GGUF metadata beyond the common keys, as llama.cpp's converter writes it.
  virtual void write_gguf(GgufWriter& w, const std::string& p, const ModelConfig& c) const = 0;
  // The tensors of layer `layer` (-1: those outside the layers: embedding, final norm, output),
  // each bound to where it lives in `w` (whose layers are already sized and kinded).
  virtual void tensors(const ModelConfig& c, ModelWeights& w, int layer,
                       std::vector<TensorDef>& out) const = 0;
  // Whether llama.cpp's architecture reads dense layers before the sparse ones (its
  // leading_dense_block_count): fak convert warns about dense layers only where it does not.
  virtual bool gguf_leading_dense_layers() const { return false; }
};

// The family reading config.json's model_type / GGUF's general.architecture; throws naming the
// value and the supported ones.
const Family& family_for_hf(const std::string& model_type, const std::string& label);
const Family& family_for_gguf(const std::string& arch, const std::string& label);
const std::vector<const Family*>& all_families();

}  // namespace fak
