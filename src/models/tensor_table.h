// The one list of a model's tensors (after gemma.cpp's ForEachTensor): each entry says what fak
// computes with (a matrix, a float vector, or one matrix per expert), where it lives in
// ModelWeights, and how it is stored in a Hugging Face checkpoint and in a llama.cpp GGUF.
// Loading either format, writing GGUF, quantising at load, packing panels, copying to a device,
// counting parameters and bytes, and `fak synth` all walk this list, so a tensor is named once.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/config.h"
#include "models/weights.h"

namespace fak {

enum class TensorKind : uint8_t {
  Vector,   // f32 values [rows][cols] (norms, biases, gates' constants, the DeltaNet conv kernel,
            // experts' biases [n_experts][width])
  Matrix,   // a WeightMatrix [rows, cols] in its stored type
  Experts,  // one WeightMatrix [rows, cols] per expert, n_experts of them
};

// How the values sit in a Hugging Face checkpoint.
enum class HfLayout : uint8_t {
  Plain,        // [rows, cols] ([rows] for a vector)
  Conv,         // [rows, 1, cols]: a depthwise conv kernel
  PerExpert,    // one [rows, cols] tensor per expert: "{e}" in the name is the expert's index
  Stacked,      // one [n_experts, rows, cols] tensor
  FusedFirst,   // the first half of each expert's rows of [n_experts, 2 * rows, cols]
  FusedSecond,  // the second half
  // gpt-oss (transformers' GptOssExperts computes x @ W, so a matrix is stored [cols, rows]):
  StackedTransposed,  // one [n_experts, cols, rows] tensor
  // Gate and up interleaved by columns (gate, up, gate, up, ...): experts from one
  // [n_experts, cols, 2 * rows] tensor, a vector [rows][cols] from one [rows, 2 * cols].
  InterleavedEven,  // the gate: columns 0, 2, 4, ...
  InterleavedOdd,   // the up: columns 1, 3, 5, ...
};

// A constant transform between HF's values and the ones fak (and llama.cpp's GGUF) holds.
enum class HfValue : uint8_t {
  AsIs,
  PlusOne,  // RMSNorm scale stored zero-centred: fak holds 1 + w
  NegExp,   // A_log: fak holds -exp(A_log)
};

// How llama.cpp's converter reorders a tensor against HF's order (undone at load, redone at
// export).
enum class GgufOrder : uint8_t {
  AsIs,
  RopePairs,  // llama q/k (rows, and their bias): rotate-half halves interleaved into pairs
  VHeadRows,  // Qwen3.5 DeltaNet: runs of order_per_head rows from order_offset, grouped -> tiled
  VHeadCols,  // the same over columns (out_proj)
};

struct TensorDef {
  TensorKind kind = TensorKind::Matrix;
  WeightMatrix* matrix = nullptr;                // Matrix
  std::vector<float>* vector = nullptr;          // Vector
  std::vector<WeightMatrix>* experts = nullptr;  // Experts
  int64_t rows = 0, cols = 1;
  int n_experts = 0;
  int layer = -1;  // -1 outside the layers

  // Hugging Face: the name under the language model's prefix ("layers.3.mlp.gate.weight"), or
  // from the checkpoint's root with hf_root ("lm_head.weight").
  std::string hf;
  bool hf_root = false;
  HfLayout hf_layout = HfLayout::Plain;
  HfValue hf_value = HfValue::AsIs;
  // Another spelling checkpoints use for the same tensor (experts: per-expert tensors vs fused),
  // read when `hf` is absent; `fak synth` writes the first.
  std::string hf_alt;
  HfLayout hf_alt_layout = HfLayout::Plain;

  // GGUF: the full name ("blk.3.ffn_gate_inp.weight") and llama.cpp's row/column order.
  std::string gguf;
  GgufOrder gguf_order = GgufOrder::AsIs;
  int64_t order_offset = 0, order_per_head = 0;
  // VHeadRows / VHeadCols: where the loader records that it kept the layer's value heads in the
  // file's tiled order (DeltaNetWeights::tiled_v_heads), which it does for every one of them when
  // the layer's out_proj ("ssm_out") has blocks wider than a value head.
  bool* v_heads_tiled = nullptr;
  // What llama-quantize calls the tensor ("attn_v", "ffn_down_exps", "output"): the quantisation
  // rules (quant_policy.h) key on it.
  std::string role;
  // Kept in a float type whatever the file type: llama-quantize never quantises it (the MoE router
  // and shared-expert gate; 1-D tensors and the conv kernel are vectors, always f32).
  bool keep_float = false;
  // What `fak synth` fills it with: random normal values, or the identity of a norm scale (1, or 0
  // when stored zero-centred), or ones (HF's initial dt_bias).
  enum class Init : uint8_t { Random, NormScale, Ones } init = Init::Random;

  bool is_matrix_like() const { return kind != TensorKind::Vector; }
  // Elements in all (every expert's).
  int64_t elements() const { return rows * cols * (kind == TensorKind::Experts ? n_experts : 1); }
};

// The tensors of `c`'s family bound into `w`, which this sizes (layers, kinds, expert lists)
// first. Outside the layers first, then layer by layer.
std::vector<TensorDef> tensor_table(const ModelConfig& c, ModelWeights& w);
// Sizes `w` for `c` (layers and their kinds, empty otherwise): tensor_table's first step, also
// for loaders that check the last layer before listing the rest.
void shape_weights(const ModelConfig& c, ModelWeights& w);
// One layer's (or, with -1, the non-layer) part of the table. Part n_layers, when the model has
// an MTP head, is the head (GGUF block n_layers, as llama.cpp's converter writes it).
std::vector<TensorDef> tensor_table_part(const ModelConfig& c, ModelWeights& w, int layer);
// One past the last part: n_layers, or n_layers + 1 with an MTP head.
int table_parts_end(const ModelConfig& c);

// Every matrix of w once (expert matrices one by one; a tied output head is the embedding and is
// not visited again), for packing, quantising and copying to a device. `def` is its entry.
void for_each_matrix(const ModelConfig& c, ModelWeights& w,
                     const std::function<void(WeightMatrix&, const TensorDef& def)>& fn);

// The bytes of every matrix (a tied head once): what a forward pass may read.
size_t matrix_bytes(const ModelConfig& c, const ModelWeights& w);
// Parameters of the matrices (a tied head once).
double matrix_params(const ModelConfig& c, const ModelWeights& w);
// The bytes one token reads in a decode step: every matrix but the embedding (looked up, one row)
// unless it is also the output head, and of each MoE layer's experts only the n_experts_used it
// routes to (their share of the experts' bytes).
double active_bytes_per_token(const ModelConfig& c, const ModelWeights& w);

}  // namespace fak
