// Session edits that rewrite the middle of a context: span eviction (exact and shift) and the
// batched decode step.
#include <algorithm>
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
  const std::vector<int32_t> suffix(tokens().begin() + end, tokens().end());
  // A shift on a model with sliding windows needs the windowed rows the span leaves in the last
  // token's window (it moves the end closer to older rows): where they were dropped
  // (memory/kv_cache.h), the eviction is exact instead.
  const int window_from = std::max(0, begin - cache_->max_window()) / cache_->block_size();
  const bool windows_kept = std::all_of(blocks().begin() + window_from, blocks().end(),
                                        [&](int32_t b) { return cache_->has_window_rows(b); });
  if (mode == EvictMode::Exact || suffix.empty() || !windows_kept) {
    // Keep [0, begin) as it is; everything after the span attended to it, so recompute it at its
    // new positions. By the forward's determinism this equals a cold prefill of prefix + suffix.
    // (Where windowed rows before `begin` were dropped, from the latest point they are kept.)
    cells_.truncate(begin);
    if (!suffix.empty()) {
      keep_and_append(begin, suffix);
    } else if (begin > 0) {
      const int32_t last = tokens().back();
      keep_and_append(begin - 1, {&last, 1});
    } else {
      logits_valid_ = false;
    }
    return;
  }
  // Shift: move each survivor's rows down by the span length and put its key at the new position:
  // rotated once from Kraw when the cache keeps pre-RoPE keys (layer 0's K/V are then exactly what
  // a fresh run computes), else the stored key rotated by the distance it moved, as llama.cpp's
  // K-shift does (layer 0 then within rounding of a fresh run). Deeper layers keep values
  // computed while attending to the span either way.
  check(!model_->config().is_hybrid(),
        "evict --shift is not possible on hybrid models (recurrent state cannot be re-positioned); "
        "use exact");
  const ModelConfig& c = model_->config();
  const int n_new = size() - (end - begin);
  cells_.reserve(begin, size(), /*keep_all_rows=*/true);  // sources are read from these blocks too
  const int bs = cache_->block_size();
  const int half = model_->rope().rotary_dim() / 2;
  // Each attention layer rotates with its own table (Gemma 3's local layers have one).
  const int tables = c.n_rope_tables();
  std::vector<int> table_of(size_t(model_->n_attention_layers()), 0);
  for (int layer = 0; layer < c.n_layers; ++layer)
    if (const int al = model_->attention_index(layer); al >= 0)
      table_of[size_t(al)] = c.rope_table(layer);
  const std::vector<float> row(static_cast<size_t>(half));
  std::vector<std::vector<float>> cs(static_cast<size_t>(tables), row), sn = cs;
  std::vector<float> k(static_cast<size_t>(c.kv_dim()));
  const bool kraw = cache_->keeps_kraw();
  // Every survivor moves by the same distance: one rotation for all of them without Kraw.
  if (!kraw)
    for (int t = 0; t < tables; ++t)
      model_->rope(t).shift_angles(begin - end, cs[size_t(t)].data(), sn[size_t(t)].data());
  for (size_t j = 0; j < suffix.size(); ++j) {
    const int from = end + int(j), to = begin + int(j);
    if (kraw)
      for (int t = 0; t < tables; ++t)
        model_->rope(t).angles(to, cs[size_t(t)].data(), sn[size_t(t)].data());
    const int32_t bf = blocks()[size_t(from / bs)], bt = blocks()[size_t(to / bs)];
    for (int l = 0; l < model_->n_attention_layers(); ++l) {
      const std::vector<float>& lc = cs[size_t(table_of[size_t(l)])];
      const std::vector<float>& ls = sn[size_t(table_of[size_t(l)])];
      cache_->move_row(bt, to % bs, bf, from % bs, l, KvPlane::V);
      cache_->move_row(bt, to % bs, bf, from % bs, l, kraw ? KvPlane::Kraw : KvPlane::K);
      cache_->load_row(bt, l, kraw ? KvPlane::Kraw : KvPlane::K, to % bs, k.data());
      for (int h = 0; h < c.n_kv_heads; ++h)
        rope_apply(k.data() + h * c.head_dim, 2 * half, lc.data(), ls.data());
      cache_->store_row(bt, l, KvPlane::K, to % bs, k.data());
    }
  }
  cells_.erase(begin, end);
  // Fresh next-token logits over the shifted cache: re-run the last token.
  const int32_t last = tokens().back();
  cells_.truncate(n_new - 1);
  append({&last, 1});
}

void append_batch(std::span<Session* const> sessions,
                  std::span<const std::span<const int32_t>> tokens,
                  std::span<std::vector<float>* const> all_logits) {
  check(sessions.size() == tokens.size(), "append_batch: one token span per session");
  check(all_logits.empty() || all_logits.size() == sessions.size(),
        "append_batch: all_logits must be empty or one per session");
  if (sessions.empty()) return;
  KvCache& cache = sessions[0]->cache();
  const Model& model = sessions[0]->model();
  std::vector<BatchItem> items;
  std::vector<size_t> in_batch;
  for (size_t i = 0; i < sessions.size(); ++i) {
    Session& s = *sessions[i];
    check(&s.cache() == &cache && &s.model() == &model,
          "append_batch: sessions must share model and cache");
    if (tokens[i].empty()) continue;
    std::vector<float>* all = all_logits.empty() ? nullptr : all_logits[i];
    s.reserve_for_append(int(tokens[i].size()));
    s.mutable_logits().resize(size_t(model.config().vocab));
    BatchItem it;
    it.blocks = &s.blocks();
    it.state = s.recurrent_state();
    it.tokens = tokens[i].data();
    it.n_tokens = int(tokens[i].size());
    it.start_pos = s.size();
    it.hidden = s.hidden_out(s.size(), it.n_tokens);
    it.logits = s.mutable_logits().data();
    if (all) {
      all->resize(tokens[i].size() * size_t(model.config().vocab));
      it.logits = all->data();
      it.all_logits = true;
      it.trail = s.begin_trail();  // hybrid: a verify whose rejected tail may be dropped
    }
    items.push_back(it);
    in_batch.push_back(i);
  }
  if (items.empty()) return;
  model.forward(items, cache);
  const size_t vocab = size_t(model.config().vocab);
  for (size_t i : in_batch) {
    if (std::vector<float>* all = all_logits.empty() ? nullptr : all_logits[i]) {
      const float* last = all->data() + (tokens[i].size() - 1) * vocab;
      sessions[i]->mutable_logits().assign(last, last + vocab);
    }
    sessions[i]->commit_append(tokens[i]);
  }
}

void decode_batch(std::span<Session* const> sessions, std::span<const int32_t> tokens) {
  check(sessions.size() == tokens.size(), "decode_batch: one token per session");
  std::vector<std::span<const int32_t>> spans;
  for (const int32_t& t : tokens) spans.emplace_back(&t, 1);
  append_batch(sessions, spans);
}

}  // namespace fak
