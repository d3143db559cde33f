// Sessions on hybrid models: the DeltaNet state cannot be cut or shifted like KV rows, so edits
// restore a checkpoint of it and replay. What makes that exact:
//
// note: the chunked prefill and the one-token recurrent step of models/deltanet.cpp differ in the
// last bits, so a state depends on how its tokens were grouped into forward calls. The rule here:
//   * a session remembers where each of its appends started (starts_, a decode step is an append
//     of one token); a long append runs as forward calls of kCheckpointInterval tokens counted from
//     its start (a multiple of the 64-token chunk, so the split changes nothing);
//   * the reference for an edited session is a cold run with the same appends: truncate(n) keeps
//     the appends clipped at n; an exact evict removes the span from the appends it fell in (an
//     append left empty vanishes, one that loses its head starts where the span began);
//   * an edit restores the newest checkpoint at or before the first position it changes and
//     replays from there with those append boundaries, so every forward call of the replay is
//     the call the cold run makes, and the result is bit-identical to it.
// Checkpoints are taken after every forward call of more than one token (the end of each prompt or
// turn, and every kCheckpointInterval tokens inside long ones) and every kCheckpointInterval tokens
// of decoding; at most kMaxCheckpoints per session, the oldest dropped first (position 0, the zero
// state, is always available). They are immutable and shared between clones.
//
// A checkpoint taken while the session is still its first append, at a multiple of
// kCheckpointInterval, is *cold*: every forward call before it is one a cold append of any longer
// prompt with the same head makes, so runtime/prefix_cache can hand it to other sessions.
#include <algorithm>

#include "core/error.h"
#include "runtime/session.h"

namespace fak {

namespace {

constexpr int kCheckpointInterval = kStateCheckpointInterval;
constexpr size_t kMaxCheckpoints = 8;

}  // namespace

size_t Session::checkpoint_bytes() const {
  size_t n = 0;
  for (const auto& c : checkpoints_) n += c->bytes();
  return n;
}

Session Session::from_checkpoint(std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache,
                                 std::vector<int32_t> tokens, std::vector<int32_t> blocks,
                                 std::shared_ptr<const StateCheckpoint> cp) {
  check(cp && cp->cold && size_t(cp->pos) == tokens.size() && cp->pos % kCheckpointInterval == 0,
        "from_checkpoint: the checkpoint is not a cold one at the end of the tokens");
  Session s = from_blocks(std::move(model), std::move(cache), std::move(tokens), std::move(blocks));
  check(s.hybrid() && cp->state.bytes() == s.state_.bytes(),
        "from_checkpoint: the state does not fit the model");
  s.state_ = cp->state;
  s.logits_ = cp->logits;
  s.logits_valid_ = true;
  s.starts_ = {0};
  s.checkpoints_ = {std::move(cp)};
  s.continue_append_ = true;
  return s;
}

void Session::append_hybrid(std::span<const int32_t> tokens, std::vector<float>* all_logits) {
  // Check what can fail before the first call runs, so a bad request leaves the session untouched.
  const ModelConfig& c = model_->config();
  reserve_for_append(int(tokens.size()));
  for (int32_t t : tokens)
    if (t < 0 || t >= c.vocab)
      fail("token id " + std::to_string(t) + " is outside the vocabulary (0.." +
           std::to_string(c.vocab - 1) + ")");
  if (all_logits) all_logits->resize(tokens.size() * size_t(c.vocab));
  for (size_t off = 0; off < tokens.size(); off += kCheckpointInterval) {
    const size_t n = std::min(tokens.size() - off, size_t(kCheckpointInterval));
    forward_segment(tokens.subspan(off, n),
                    all_logits ? all_logits->data() + off * size_t(c.vocab) : nullptr,
                    off == 0 && !continue_append_);
  }
}

void Session::maybe_checkpoint(int segment_tokens) {
  const int last = checkpoints_.empty() ? 0 : checkpoints_.back()->pos;
  if (segment_tokens <= 1 && size() - last < kCheckpointInterval) return;
  auto cp = std::make_shared<StateCheckpoint>();
  cp->pos = size();
  cp->state = state_;
  cp->logits = logits_;
  cp->cold = starts_.size() == 1 && cp->pos % kCheckpointInterval == 0;
  checkpoints_.push_back(std::move(cp));
  if (checkpoints_.size() > kMaxCheckpoints) checkpoints_.erase(checkpoints_.begin());
}

void Session::truncate_hybrid(int n) {
  std::vector<int32_t> starts;
  for (int32_t s : starts_)
    if (s < n) starts.push_back(s);
  rewind({tokens().begin(), tokens().begin() + n}, starts, n);
}

void Session::evict_hybrid(int begin, int end) {
  std::vector<int32_t> tokens(this->tokens().begin(), this->tokens().begin() + begin);
  tokens.insert(tokens.end(), this->tokens().begin() + end, this->tokens().end());
  const int removed = end - begin;
  std::vector<int32_t> starts;
  for (size_t i = 0; i < starts_.size(); ++i) {
    const int s = starts_[i];
    const int next = i + 1 < starts_.size() ? starts_[i + 1] : size();
    int mapped = -1;
    if (s < begin) {
      mapped = s;
    } else if (s >= end) {
      mapped = s - removed;
    } else if (next > end) {
      mapped = begin;  // lost its head to the span; the rest is still an append of its own
    }
    if (mapped >= 0 && (starts.empty() || starts.back() != mapped)) starts.push_back(mapped);
  }
  rewind(tokens, starts, begin);
}

// Makes the session hold `tokens` appended with boundaries `starts`, given that positions before
// `unchanged` (tokens and boundaries) are the same as now.
void Session::rewind(const std::vector<int32_t>& tokens, const std::vector<int32_t>& starts,
                     int unchanged) {
  continue_append_ = false;
  while (!checkpoints_.empty() && checkpoints_.back()->pos > unchanged) checkpoints_.pop_back();
  int pos = 0;
  if (checkpoints_.empty()) {
    state_.clear();
    logits_valid_ = false;
  } else {
    const StateCheckpoint& cp = *checkpoints_.back();
    pos = cp.pos;
    state_ = cp.state;
    logits_ = cp.logits;
    logits_valid_ = true;
  }
  cells_.truncate(pos);
  starts_.clear();
  for (int32_t s : starts)
    if (s < pos) starts_.push_back(s);
  // Replay in the forward calls the cold run makes: each append split every kCheckpointInterval
  // tokens from its start. pos is a boundary of that grid (every checkpoint sits on one).
  const int n = int(tokens.size());
  while (pos < n) {
    auto it = std::upper_bound(starts.begin(), starts.end(), pos);
    const int next_start = it == starts.end() ? n : *it;
    const int append_start = it == starts.begin() ? 0 : *(it - 1);
    const int grid_end =
        append_start + ((pos - append_start) / kCheckpointInterval + 1) * kCheckpointInterval;
    const int seg_end = std::min(next_start, grid_end);
    forward_segment({tokens.data() + pos, size_t(seg_end - pos)}, nullptr, pos == append_start);
    pos = seg_end;
  }
}

}  // namespace fak
