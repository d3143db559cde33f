// Sessions on hybrid models: the DeltaNet state cannot be cut or shifted like KV rows, so an edit
// restores a checkpoint of it (memory/state_checkpoint.h) and replays the tokens after it.
//
// Exact because a state depends on its tokens alone: every token's update is the same recurrent
// step whatever the forward calls were (ops/deltanet.cpp), so a replay from a checkpoint at p of
// the tokens after p gives the bits a cold run of all of them gives, with any call boundaries.
//
// Checkpoints: at the end of every append of several tokens (a prompt, a turn, a session call, an
// edit's replay), every kDecodeInterval one-token steps, and wherever a caller asks (checkpoint():
// the server takes one at the end of each request, prompt and reply included). At most
// kMaxCheckpoints per session, the oldest dropped first (position 0, the zero state, is always
// there). They live in the cache's KV blocks, inside its budget: one that does not fit is not
// taken, and an edit then replays from an older one.
#include <algorithm>

#include "core/error.h"
#include "runtime/session.h"

namespace fak {

namespace {

constexpr int kDecodeInterval = 256;
constexpr size_t kMaxCheckpoints = 8;

}  // namespace

size_t Session::checkpoint_bytes() const {
  size_t n = 0;
  for (const auto& c : checkpoints_) n += c->bytes();
  return n;
}

bool Session::checkpoint() {
  if (!hybrid() || size() == 0 || !logits_valid_) return true;
  if (!checkpoints_.empty() && checkpoints_.back()->pos() == size()) return true;
  try {
    checkpoints_.push_back(StateCheckpoint::take(cache_, size(), state_, logits_));
  } catch (const KvBudgetError&) {
    return false;
  }
  if (checkpoints_.size() > kMaxCheckpoints) checkpoints_.erase(checkpoints_.begin());
  return true;
}

Session Session::from_checkpoint(std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache,
                                 std::vector<int32_t> tokens, std::vector<int32_t> blocks,
                                 std::shared_ptr<const StateCheckpoint> cp) {
  check(cp && size_t(cp->pos()) == tokens.size(),
        "from_checkpoint: the checkpoint is not at the end of the tokens");
  Session s = from_blocks(std::move(model), std::move(cache), std::move(tokens), std::move(blocks));
  check(s.hybrid(), "from_checkpoint: the model has no recurrent state");
  cp->restore(s.state_, s.logits_);
  s.logits_valid_ = true;
  s.checkpoints_ = {std::move(cp)};
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
  for (size_t off = 0; off < tokens.size(); off += kHybridCallTokens) {
    const size_t n = std::min(tokens.size() - off, size_t(kHybridCallTokens));
    forward_segment(tokens.subspan(off, n),
                    all_logits ? all_logits->data() + off * size_t(c.vocab) : nullptr);
  }
  if (tokens.size() > 1) checkpoint();
}

void Session::decode_checkpoint() {
  const int last = checkpoints_.empty() ? 0 : checkpoints_.back()->pos();
  if (size() - last >= kDecodeInterval) checkpoint();
}

void Session::truncate_hybrid(int n) {
  rewind({tokens().begin(), tokens().begin() + n}, n);
}

void Session::evict_hybrid(int begin, int end) {
  std::vector<int32_t> tokens(this->tokens().begin(), this->tokens().begin() + begin);
  tokens.insert(tokens.end(), this->tokens().begin() + end, this->tokens().end());
  rewind(tokens, begin);
}

void Session::rewind(const std::vector<int32_t>& tokens, int unchanged) {
  trail_valid_ = false;
  while (!checkpoints_.empty() && checkpoints_.back()->pos() > unchanged) checkpoints_.pop_back();
  int pos = 0;
  if (checkpoints_.empty()) {
    state_.clear();
    logits_valid_ = false;
  } else {
    checkpoints_.back()->restore(state_, logits_);
    pos = checkpoints_.back()->pos();
    logits_valid_ = true;
  }
  cells_.truncate(pos);
  if (pos < int(tokens.size()))
    append_hybrid({tokens.data() + pos, tokens.size() - size_t(pos)}, nullptr);
}

}  // namespace fak
