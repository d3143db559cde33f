// Causal multi-head attention (GQA) of new queries over a paged KV cache.
//
// note: each query's result depends only on that query and the keys/values at positions
// [0, its own position]: scores, softmax and the weighted V sum are computed in the same order in
// prefill and in decode, so a cache hit, a replay or a batched step reproduce a cold run bit for
// bit.
#pragma once

#include <cstdint>
#include <vector>

namespace fak {

class KvCache;

struct AttentionTask {
  const float* q;  // [n_tokens][n_heads * head_dim], RoPE applied
  float* out;      // [n_tokens][n_heads * head_dim]
  const std::vector<int32_t>* blocks;
  int n_tokens;
  int start_pos;  // position of the first query; query i attends to [0, start_pos + i]
};

struct AttentionShape {
  int n_heads, n_kv_heads, head_dim;
  float scale;
  // > 0: sliding-window attention (Gemma 3's local layers): a query at position p attends only to
  // positions [p - window + 1, p], as transformers' sliding_window mask. Its result is a function
  // of those keys alone, in order, in every path (decode, prefill, batched), like a full query's.
  int window = 0;
  // [n_heads] or null: attention sinks (gpt-oss): head h's softmax also counts exp(sinks[h]) in
  // its denominator, as a key with a zero value would. A lane starts its max at the sink and its
  // sum at exp(sink - max), so a model without sinks (-inf: max unchanged, sum +0) keeps its bits.
  const float* sinks = nullptr;
};

// Runs all tasks (one per sequence in the batch) over attention layer `layer`, multithreaded.
// Picks the tiled AVX2 kernel when the CPU and head size allow, else the portable path.
void attention(const std::vector<AttentionTask>& tasks, const KvCache& cache, int layer,
               const AttentionShape& shape);

// The portable path (one query head at a time, libm exp): the reference the kernels are tested
// against. Agrees with attention() to rounding, not bit for bit.
void attention_reference(const std::vector<AttentionTask>& tasks, const KvCache& cache, int layer,
                         const AttentionShape& shape);

}  // namespace fak
