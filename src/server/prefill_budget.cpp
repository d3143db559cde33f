#include "server/prefill_budget.h"

#include <algorithm>

namespace fak::server {

double prompt_token_work(const ModelConfig& c, int64_t depth) {
  const double dim = c.dim;
  double work = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const bool attention = c.layers[size_t(l)].mixer == LayerKind::FullAttention;
    if (attention) {
      const double q = double(c.q_dim()), kv = double(c.kv_dim());
      work += dim * (q * (c.attn_output_gate ? 2 : 1) + 2 * kv) + q * dim;
      const int64_t window = c.window(l);
      work += 2 * q * double(window > 0 ? std::min(depth, window) : depth);  // q.K and p.V
    } else {
      const double k = double(c.linear_num_key_heads) * c.linear_key_head_dim;
      const double v = double(c.linear_num_value_heads) * c.linear_value_head_dim;
      work += dim * (2 * k + 2 * v) + v * dim;  // q, k, v, z in; out
    }
    const bool moe = c.layers[size_t(l)].ffn == FfnKind::Moe;
    work += moe ? 3 * dim *
                      (double(c.n_experts_used) * c.expert_hidden_dim + c.shared_expert_hidden_dim)
                : 3 * dim * c.hidden_dim;
  }
  return work;
}

int prefill_budget(const ModelConfig& c, int chunk, int64_t deepest, bool others_decode) {
  if (!others_decode || deepest <= 0) return chunk;
  const double ratio = prompt_token_work(c, deepest) / prompt_token_work(c, 0);
  const int budget = int(double(chunk) / ratio);
  return std::clamp(budget, std::min(kFewestPromptTokens, chunk), chunk);
}

}  // namespace fak::server
