// Session edits that rewrite the middle of a context: span eviction (exact and shift) and the
// batched decode step.
#include <cstring>

#include "core/error.h"
#include "ops/ops.h"
#include "runtime/session.h"

namespace fak {

void Session::evict(int begin, int end, EvictMode mode) {
  check(0 <= begin && begin <= end && end <= size(),
        "evict: span [" + std::to_string(begin) + ", " + std::to_string(end) + ") is outside the " +
            std::to_string(size()) + "-token context");
  if (begin == end) return;
  if (hybrid()) {
    check(mode == EvictMode::Exact || end == size(),
          "evict --shift is not possible on hybrid models (recurrent state cannot be "
          "re-positioned); use exact");
    return evict_hybrid(begin, end);
  }
  const std::vector<int32_t> suffix(tokens_.begin() + end, tokens_.end());
  if (mode == EvictMode::Exact || suffix.empty()) {
    // Keep [0, begin) as it is; everything after the span attended to it, so recompute it at its
    // new positions. By the forward's determinism this equals a cold prefill of prefix + suffix.
    truncate_blocks(begin);
    tokens_.resize(size_t(begin));
    logits_valid_ = false;
    if (!suffix.empty()) {
      append(suffix);
    } else if (begin > 0) {
      const int32_t last = tokens_.back();
      truncate_blocks(begin - 1);
      tokens_.pop_back();
      append({&last, 1});
    }
    return;
  }
  // Shift: move each survivor's V and Kraw rows down by the span length and rotate K once from
  // Kraw to the new position. note: only layer 0's K/V are then exactly what a fresh run computes;
  // deeper layers keep values computed while attending to the span.
  check(cache_->keeps_kraw(), "evict --shift needs Kraw (the cache was created without it)");
  check(!model_->config().is_hybrid(),
        "evict --shift is not possible on hybrid models (recurrent state cannot be re-positioned); use exact");
  const ModelConfig& c = model_->config();
  const int n_new = size() - (end - begin);
  make_writable(begin, size(), /*keep_all_rows=*/true);  // sources are read from these blocks too
  const int bs = cache_->block_size();
  const int half = model_->rope().rotary_dim() / 2;
  const size_t row_bytes = cache_->row_bytes();
  std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
  std::vector<float> k(static_cast<size_t>(c.kv_dim()));
  for (size_t j = 0; j < suffix.size(); ++j) {
    const int from = end + int(j), to = begin + int(j);
    model_->rope().angles(to, cs.data(), sn.data());
    const int32_t bf = blocks_[size_t(from / bs)], bt = blocks_[size_t(to / bs)];
    for (int l = 0; l < model_->n_attention_layers(); ++l) {
      std::memmove(cache_->row(bt, l, KvPlane::V, to % bs), cache_->row(bf, l, KvPlane::V, from % bs), row_bytes);
      std::memmove(cache_->row(bt, l, KvPlane::Kraw, to % bs), cache_->row(bf, l, KvPlane::Kraw, from % bs),
                   row_bytes);
      cache_->load_row(bt, l, KvPlane::Kraw, to % bs, k.data());
      for (int h = 0; h < c.n_kv_heads; ++h) rope_apply(k.data() + h * c.head_dim, 2 * half, cs.data(), sn.data());
      cache_->store_row(bt, l, KvPlane::K, to % bs, k.data());
    }
  }
  tokens_.erase(tokens_.begin() + begin, tokens_.begin() + end);
  truncate_blocks(n_new);
  // Fresh next-token logits over the shifted cache: re-run the last token.
  const int32_t last = tokens_.back();
  tokens_.pop_back();
  truncate_blocks(n_new - 1);
  append({&last, 1});
}

void decode_batch(std::span<Session* const> sessions, std::span<const int32_t> tokens) {
  check(sessions.size() == tokens.size(), "decode_batch: one token per session");
  if (sessions.empty()) return;
  KvCache& cache = sessions[0]->cache();
  const Model& model = sessions[0]->model();
  std::vector<BatchItem> items(sessions.size());
  for (size_t i = 0; i < sessions.size(); ++i) {
    Session& s = *sessions[i];
    check(&s.cache() == &cache && &s.model() == &model, "decode_batch: sessions must share model and cache");
    s.reserve_for_append(1);
    s.mutable_logits().resize(size_t(model.config().vocab));
    items[i].blocks = &s.blocks();
    items[i].state = s.recurrent_state();
    items[i].tokens = &tokens[i];
    items[i].n_tokens = 1;
    items[i].start_pos = s.size();
    items[i].logits = s.mutable_logits().data();
  }
  model.forward(items, cache);
  for (size_t i = 0; i < sessions.size(); ++i) sessions[i]->commit_append({&tokens[i], 1});
}

}  // namespace fak
