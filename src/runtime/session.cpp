#include "runtime/session.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace fak {

Session::Session(std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache)
    : model_(std::move(model)),
      cache_(std::move(cache)),
      cells_(cache_.get()),
      state_(model_->config().recurrent_shape()) {
  check(cache_->n_layers() == model_->n_attention_layers() &&
            cache_->n_kv_heads() == model_->config().n_kv_heads &&
            cache_->head_dim() == model_->config().head_dim,
        "Session: KV cache shape does not match the model");
}

Session::~Session() = default;

Session::Session(Session&& o) noexcept
    : model_(std::move(o.model_)),
      cache_(std::move(o.cache_)),
      cells_(std::move(o.cells_)),
      logits_(std::move(o.logits_)),
      logits_valid_(o.logits_valid_),
      state_(std::move(o.state_)),
      checkpoints_(std::move(o.checkpoints_)),
      trail_(std::move(o.trail_)),
      trail_before_(std::move(o.trail_before_)),
      trail_base_(o.trail_base_),
      trail_pending_(o.trail_pending_),
      trail_valid_(o.trail_valid_),
      hidden_(std::move(o.hidden_)) {
  trail_.before = &trail_before_;
}

Session& Session::operator=(Session&& o) noexcept {
  if (this != &o) {
    cells_ = std::move(o.cells_);  // releases ours first, while our cache is still alive
    model_ = std::move(o.model_);
    cache_ = std::move(o.cache_);
    logits_ = std::move(o.logits_);
    logits_valid_ = o.logits_valid_;
    state_ = std::move(o.state_);
    checkpoints_ = std::move(o.checkpoints_);
    trail_ = std::move(o.trail_);
    trail_before_ = std::move(o.trail_before_);
    trail_.before = &trail_before_;
    trail_base_ = o.trail_base_;
    trail_pending_ = o.trail_pending_;
    trail_valid_ = o.trail_valid_;
    hidden_ = std::move(o.hidden_);
  }
  return *this;
}

void Session::keep_hidden(bool on) {
  hidden_ = KeptHidden{};
  hidden_.on = on;
}

std::span<const float> Session::hidden(int from, int to) const {
  const size_t dim = size_t(model_->config().dim);
  const int kept = hidden_.base + int(hidden_.rows.size() / dim);
  if (!hidden_.on || from < hidden_.base || to > std::min(kept, size()) || from > to) return {};
  return {hidden_.rows.data() + size_t(from - hidden_.base) * dim, size_t(to - from) * dim};
}

float* Session::hidden_out(int start, int n) {
  if (!hidden_.on) return nullptr;
  // Rows from `start` on are rewritten; rows before it stay when they lead up to it.
  constexpr int kKeptRows = 2048;
  const size_t dim = size_t(model_->config().dim);
  const int kept = hidden_.base + int(hidden_.rows.size() / dim);
  if (start < hidden_.base || start > kept) {
    hidden_.rows.clear();
    hidden_.base = start;
  }
  hidden_.rows.resize(size_t(start - hidden_.base) * dim);
  if (start - hidden_.base > kKeptRows) {
    const int drop = start - hidden_.base - kKeptRows / 2;
    hidden_.rows.erase(hidden_.rows.begin(), hidden_.rows.begin() + std::ptrdiff_t(drop * dim));
    hidden_.base += drop;
  }
  const size_t at = hidden_.rows.size();
  hidden_.rows.resize(at + size_t(n) * dim);
  return hidden_.rows.data() + at;
}

std::span<const float> Session::sampleable_logits() const {
  return std::span<const float>(logits_).first(
      std::min(logits_.size(), size_t(model_->sampleable_vocab())));
}

void Session::reserve_for_append(int n) {
  const int limit = model_->config().context_limit();
  if (size() + n > limit)
    fail("prompt too long: " + std::to_string(size() + n) + " tokens exceed the context of " +
         std::to_string(limit));
  // A new call ends any truncate back into the last one: rows behind the window go first, so a
  // windowed layer holds its window and this call's rows, not the last call's too.
  drop_window_rows_behind(size());
  cells_.reserve(size(), size() + n);
}

DeltaNetTrail* Session::begin_trail() {
  if (!hybrid()) return nullptr;
  trail_before_ = state_;
  trail_.before = &trail_before_;
  trail_.recorded = false;
  trail_.n_tokens = 0;
  trail_base_ = size();
  trail_pending_ = true;
  return &trail_;
}

void Session::commit_append(std::span<const int32_t> tokens) {
  const int call_start = size();
  cells_.push(tokens);
  drop_window_rows_behind(call_start);
  logits_valid_ = true;
  trail_valid_ = trail_pending_;
  trail_pending_ = false;
  if (hybrid() && tokens.size() == 1) decode_checkpoint();
}

void Session::append(std::span<const int32_t> tokens, std::vector<float>* all_logits) {
  if (tokens.empty()) return;
  if (hybrid() && all_logits && tokens.size() <= size_t(kHybridCallTokens)) {
    // One call whose tail truncate(n, logits) can drop (a speculative verify): no checkpoint.
    all_logits->resize(tokens.size() * size_t(model_->config().vocab));
    begin_trail();
    forward_segment(tokens, all_logits->data());
    return;
  }
  if (hybrid()) return append_hybrid(tokens, all_logits);
  const size_t vocab = size_t(model_->config().vocab);
  if (all_logits) all_logits->resize(tokens.size() * vocab);
  // Windowed layers drop their rows behind each call: calls of a bounded size keep what they hold
  // bounded (where calls split changes no bit, ops/attention.h).
  const size_t call = cache_->has_windows() ? size_t(kWindowedCallTokens) : tokens.size();
  for (size_t at = 0; at < tokens.size(); at += call)
    forward_segment(tokens.subspan(at, std::min(call, tokens.size() - at)),
                    all_logits ? all_logits->data() + at * vocab : nullptr);
}

void Session::drop_window_rows_behind(int call_start) {
  if (!cache_->has_windows()) return;
  const int bs = cache_->block_size();
  const int horizon = call_start - cache_->max_window();  // rows before it are not read again
  const std::vector<int32_t>& b = blocks();
  for (int i = 0; (i + 1) * bs <= horizon; ++i)
    if (cache_->refcount(b[size_t(i)]) == 1) cache_->drop_window_rows(b[size_t(i)]);
}

void Session::keep_and_append(int keep, std::span<const int32_t> more) {
  cells_.truncate(keep);
  logits_valid_ = false;
  const int from = cache_->exact_point(blocks(), keep);
  std::vector<int32_t> redo(tokens().begin() + from, tokens().end());
  redo.insert(redo.end(), more.begin(), more.end());
  cells_.truncate(from);
  append(redo);
}

void Session::forward_segment(std::span<const int32_t> tokens, float* all_logits) {
  reserve_for_append(int(tokens.size()));
  const int vocab = model_->config().vocab;
  BatchItem it;
  it.blocks = &cells_.blocks();
  it.state = recurrent_state();
  it.trail = trail_pending_ ? &trail_ : nullptr;
  it.tokens = tokens.data();
  it.n_tokens = int(tokens.size());
  it.start_pos = size();
  it.hidden = hidden_out(size(), int(tokens.size()));
  logits_.resize(size_t(vocab));
  if (all_logits) {
    it.logits = all_logits;
    it.all_logits = true;
  } else {
    it.logits = logits_.data();
  }
  try {
    model_->forward({&it, 1}, *cache_);
  } catch (...) {
    trail_pending_ = false;
    throw;
  }
  if (all_logits) {
    const float* last = all_logits + (tokens.size() - 1) * size_t(vocab);
    logits_.assign(last, last + vocab);
  }
  commit_append(tokens);
}

Session Session::from_blocks(std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache,
                             std::vector<int32_t> tokens, std::vector<int32_t> blocks) {
  Session s(std::move(model), std::move(cache));
  s.cells_ = KvCells(s.cache_.get(), std::move(tokens), std::move(blocks));
  return s;
}

Session Session::clone() const {
  Session s(model_, cache_);
  s.cells_ = cells_.share();
  s.logits_ = logits_;
  s.logits_valid_ = logits_valid_;
  s.state_ = state_;
  s.checkpoints_ = checkpoints_;
  s.hidden_ = hidden_;  // empty unless keep_hidden
  return s;
}

void Session::truncate(int n) {
  check(n >= 0 && n <= size(),
        "truncate: " + std::to_string(n) + " is outside 0.." + std::to_string(size()));
  if (n == size()) return;
  if (hybrid()) return truncate_hybrid(n);
  cells_.truncate(n);
  logits_valid_ = false;
  // Recompute the last kept token so logits() is valid again (one decode step; by the forward's
  // determinism the result equals the logits that position had before).
  if (n > 0) {
    const int32_t last = tokens().back();
    keep_and_append(n - 1, {&last, 1});
  }
}

void Session::truncate(int n, std::span<const float> logits) {
  check(n >= 1 && n <= size(),
        "truncate: " + std::to_string(n) + " is outside 1.." + std::to_string(size()));
  check(logits.size() == size_t(model_->config().vocab),
        "truncate: the logits are not one row of the vocabulary");
  if (hybrid() && n < size()) {
    check(trail_valid_ && n >= trail_base_,
          "truncate with logits: on a hybrid model only back into the last append made with "
          "all_logits (use truncate(n))");
    trail_valid_ = false;
    while (!checkpoints_.empty() && checkpoints_.back()->pos() > n) checkpoints_.pop_back();
    if (trail_.recorded) {
      model_->rewind_state(state_, trail_, n - trail_base_);
    } else {
      // The backend kept no inputs: the state from before the call, and the kept tokens again
      // (one forward call; the same bits, ops/deltanet.cpp).
      const std::vector<int32_t> kept(tokens().begin() + trail_base_, tokens().begin() + n);
      state_ = trail_before_;
      cells_.truncate(trail_base_);
      if (!kept.empty()) forward_segment(kept, nullptr);
    }
  }
  // Windowed rows behind n dropped (a truncate further back than the last call): recomputed, to
  // the same logits.
  if (cache_->exact_point(blocks(), n) < n) return truncate(n);
  cells_.truncate(n);
  logits_.assign(logits.begin(), logits.end());
  logits_valid_ = true;
}

}  // namespace fak
