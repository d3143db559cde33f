// Drafts from the multi-token-prediction head of the Qwen3.5 / 3.6 hybrids (Model::mtp_forward),
// for speculative decoding (runtime/speculative.h). The head was trained beside the model to
// predict the token after next from the model's last hidden state and the next token's
// embedding, so it drafts the model's own continuation wherever the context does not repeat
// itself, where n-gram lookup has nothing to propose.
//
// Per sequence: the model's hidden state at position t (after the final norm) and the token at
// t + 1 make the head's row t, which predicts the token at t + 2. The head has one attention
// layer with its own KV cache (rows 0..t), kept here. Each draft call
//   1. runs the head over the rows the session computed since the last call (a prompt, or the
//      accepted tokens of the last verify), the last of them paired with `next`, the token just
//      sampled: its prediction is draft token 1;
//   2. chains: the head's own normed output and draft token i make the next row, predicting
//      draft token i + 1 (those rows' KV is overwritten once the model's own states arrive).
// Drafts are greedy (argmax); output stays exactly plain decoding's whatever they are, since the
// model verifies every drafted token (runtime/speculative.h). The session must keep its hidden
// states (Session::keep_hidden) from before its prompt is read; rows it did not keep leave a gap
// in the head's KV, which costs acceptance, never correctness.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/generate.h"
#include "runtime/session.h"

namespace fak {

class KvCache;

class MtpDrafter {
 public:
  // The ids drafts are chosen from by default: the first 32768 of the vocabulary, which a BPE
  // vocabulary orders by frequency (merges learnt first). The output head is most of the head's
  // cost (152k rows on Qwen's vocabulary, a quarter of a 0.8B model's weights); its first 32k
  // rows cost a fifth of that. A draft never holds a rarer token, which costs acceptance where the
  // model writes one, never exactness (as FR-Spec drafts from a frequency-ranked vocabulary).
  static constexpr int kDraftVocab = 32768;

  // `session` is the sequence drafted for; it must outlive the drafter. draft_vocab: the ids
  // drafts come from (0: all; a device's head is always whole). Throws when the model has no MTP
  // head.
  MtpDrafter(Session& session, int max_draft, int draft_vocab = kDraftVocab);
  // The most the head's KV cache maps for a sequence of `positions` tokens (whole slabs, as its
  // cache maps them) when the model's cache holds `dtype` (the head's KV takes the same type):
  // what the server's KV budget sets aside for each drafting sequence.
  static size_t kv_bytes(const Model& model, int positions, DType dtype);
  ~MtpDrafter();
  MtpDrafter(const MtpDrafter&) = delete;
  MtpDrafter& operator=(const MtpDrafter&) = delete;

  // history: the session's tokens and the token sampled after them (not yet appended). Up to
  // min(max_draft, limit) tokens.
  std::vector<int32_t> draft(std::span<const int32_t> history, int limit);
  // Head forward calls made, and rows they computed (catch-up rows and chained ones).
  int calls() const { return calls_; }
  size_t kv_mapped_bytes() const;  // what the head's KV cache has mapped
  int rows() const { return rows_computed_; }

 private:
  void cover(int positions);  // KV blocks for rows [0, positions)

  Session& session_;
  int max_draft_;
  int head_rows_;  // rows of the output head the drafts read
  std::shared_ptr<KvCache> cache_;
  std::vector<int32_t> blocks_;
  int done_ = 0;  // rows [0, done_) hold the model's own states
  int calls_ = 0, rows_computed_ = 0;
  std::vector<float> logits_, hidden_out_;
};

// A Drafter (GenerateOptions::drafter) calling drafter->draft.
Drafter mtp_drafter(std::shared_ptr<MtpDrafter> drafter);

}  // namespace fak
