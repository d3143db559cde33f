#include "runtime/mtp_draft.h"

#include <algorithm>

#include "core/error.h"
#include "memory/kv_cache.h"
#include "models/model.h"
#include "runtime/sampler.h"

namespace fak {

namespace {

// The head's one attention layer keeps its own KV, beside the model's cache (another shape), in the
// model cache's type: a draft is only checked against the model, so its KV's rounding changes
// acceptance at most, never the output (f32 took 2-4x the bytes per token of an f16 or q8_0 layer).
std::shared_ptr<KvCache> head_kv_cache(const Model& m, DType dtype) {
  KvCacheOptions o;
  o.dtype = dtype;
  o.keep_kraw = false;
  o.storage = m.make_kv_storage();
  o.slab_bytes = size_t(16) << 20;
  return std::make_shared<KvCache>(1, m.config().n_kv_heads, m.config().head_dim, o);
}

}  // namespace

MtpDrafter::MtpDrafter(Session& session, int max_draft, int draft_vocab)
    : session_(session), max_draft_(max_draft) {
  const Model& m = session.model();
  const ModelConfig& c = m.config();
  check(c.mtp_layers > 0,
        m.path().string() + " has no MTP head (mtp_num_hidden_layers) to draft with");
  check(max_draft >= 1, "MTP drafts: the draft length must be at least 1");
  check(draft_vocab >= 0, "MTP drafts: the draft vocabulary cannot be negative");
  head_rows_ = c.vocab;
  if (draft_vocab > 0 && draft_vocab < c.vocab && m.device().kind == DeviceKind::Cpu)
    head_rows_ = std::min(c.vocab, (draft_vocab + 15) / 16 * 16);  // whole panels
  cache_ = head_kv_cache(m, session.cache().dtype());
}

size_t MtpDrafter::kv_mapped_bytes() const {
  return cache_->mapped_bytes();
}

size_t MtpDrafter::kv_bytes(const Model& model, int positions, DType dtype) {
  const std::shared_ptr<KvCache> cache = head_kv_cache(model, dtype);  // maps nothing until used
  const size_t blocks = (size_t(std::max(positions, 0)) + size_t(cache->block_size()) - 1) /
                        size_t(cache->block_size());
  const size_t per_slab = size_t(cache->blocks_per_slab());
  return (blocks + per_slab - 1) / per_slab * cache->slab_bytes();
}

MtpDrafter::~MtpDrafter() {
  for (int32_t b : blocks_) cache_->release(b);
}

void MtpDrafter::cover(int positions) {
  while (int(blocks_.size()) * cache_->block_size() < positions)
    blocks_.push_back(cache_->allocate());
}

std::vector<int32_t> MtpDrafter::draft(std::span<const int32_t> history, int limit) {
  const Model& m = session_.model();
  const ModelConfig& c = m.config();
  const int size = session_.size();
  check(int(history.size()) == size + 1, "MTP drafts: the history is the session and one token");
  const int n_draft = std::min(max_draft_, limit);
  if (n_draft <= 0 || size == 0) return {};
  done_ = std::min(done_, size);  // the session was cut back since
  std::span<const float> hidden = session_.hidden(done_, size);
  if (hidden.empty()) {
    // States not kept (the session read them before keep_hidden): start from what is kept, with a
    // gap in the head's KV before it.
    int from = size - 1;
    while (from > done_ && !session_.hidden(from - 1, size).empty()) --from;
    hidden = session_.hidden(from, size);
    if (hidden.empty()) return {};
    done_ = from;
  }
  const size_t dim = size_t(c.dim), vocab = size_t(c.vocab);
  const size_t choose = std::min(size_t(head_rows_), size_t(m.sampleable_vocab()));
  cover(size + n_draft);
  logits_.resize(vocab);
  std::vector<int32_t> out;
  // 1. The rows since the last call: row t pairs the model's state at t with the token at t + 1.
  BatchItem it;
  it.blocks = &blocks_;
  it.tokens = history.data() + done_ + 1;
  it.n_tokens = size - done_;
  it.start_pos = done_;
  it.logits = logits_.data();
  hidden_out_.resize(size_t(it.n_tokens) * dim);
  m.mtp_forward({&it, 1}, *cache_, hidden.data(), hidden_out_.data(), head_rows_);
  ++calls_;
  rows_computed_ += it.n_tokens;
  done_ = size;
  out.push_back(argmax({logits_.data(), choose}));
  // 2. Chained rows: the head's own output and the token it drafted.
  std::vector<float> h(hidden_out_.end() - std::ptrdiff_t(dim), hidden_out_.end());
  for (int i = 1; i < n_draft; ++i) {
    BatchItem step;
    step.blocks = &blocks_;
    step.tokens = &out.back();
    step.n_tokens = 1;
    step.start_pos = size + i - 1;
    step.logits = logits_.data();
    hidden_out_.resize(dim);
    m.mtp_forward({&step, 1}, *cache_, h.data(), hidden_out_.data(), head_rows_);
    ++calls_;
    ++rows_computed_;
    h.assign(hidden_out_.begin(), hidden_out_.end());
    out.push_back(argmax({logits_.data(), choose}));
  }
  return out;
}

Drafter mtp_drafter(std::shared_ptr<MtpDrafter> drafter) {
  return [drafter](std::span<const int32_t> history, int max_tokens) {
    return drafter->draft(history, max_tokens);
  };
}

}  // namespace fak
