// A Session is one sequence of tokens and the KV blocks it owns or shares: what a CLI run, a chat,
// an agent or an HTTP conversation is. Edits use one vocabulary: append (prefill), clone (share
// blocks, copy-on-write), truncate, evict (exact or shift), save/load.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "memory/kv_cache.h"
#include "memory/kv_cells.h"
#include "memory/recurrent_state.h"
#include "memory/state_checkpoint.h"
#include "models/model.h"

namespace fak {

// Hybrid models: an append runs as forward calls of at most this many tokens (it bounds the
// activations; where calls split changes no bit, ops/deltanet.cpp).
constexpr int kHybridCallTokens = 512;
// Models with sliding-window layers: an append runs as forward calls of at most this many tokens,
// so that what a windowed layer holds stays about its window plus one call (memory/kv_cache.h).
constexpr int kWindowedCallTokens = kWindowCallTokens;

enum class EvictMode {
  Exact,  // recompute what followed the span: bit-identical to a context that never saw it
  Shift,  // only re-position survivors (K re-rotated once from Kraw): cheap, approximate
};

class Session {
 public:
  Session(std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache);
  ~Session();
  Session(Session&& other) noexcept;
  Session& operator=(Session&& other) noexcept;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Prefills tokens. Afterwards logits() holds the next-token logits. With all_logits, receives
  // [tokens.size()][vocab] (perplexity, parity, a speculative verify); on hybrid models such a call
  // (of at most kHybridCallTokens) keeps what truncate(n, logits) needs to drop its tail, and
  // takes no checkpoint (any other append of several tokens ends with one).
  void append(std::span<const int32_t> tokens, std::vector<float>* all_logits = nullptr);

  // A session over already-computed blocks that cover `tokens` exactly (whole blocks). The caller
  // hands over one reference per block. logits() is invalid until the next append.
  static Session from_blocks(std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache,
                             std::vector<int32_t> tokens, std::vector<int32_t> blocks);

  // Hybrid models: a session over blocks covering `tokens` (one reference each handed over; the
  // last block may be partly filled) whose DeltaNet state and logits are `cp`'s (cp->pos() ==
  // tokens.size()): bit-identical to a cold append of the tokens (prefix cache hits).
  static Session from_checkpoint(std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache,
                                 std::vector<int32_t> tokens, std::vector<int32_t> blocks,
                                 std::shared_ptr<const StateCheckpoint> cp);

  // A new session sharing every block with this one: O(blocks), no KV copied.
  Session clone() const;
  // Keeps the first n tokens; logits() becomes the next-token logits after token n - 1.
  void truncate(int n);
  // truncate(n) without its forward call, for a caller that already holds the next-token logits
  // after token n - 1 (a row of append's all_logits: speculative decoding drops rejected draft
  // tokens this way). By the forward's determinism the result is bit-identical to truncate(n).
  // Hybrid models: n must lie within the last append, made with all_logits; its DeltaNet state is
  // wound back from the inputs that call recorded (Model::rewind_state), or where the backend
  // records none (a GPU's) restored from before the call and the kept tokens replayed.
  void truncate(int n, std::span<const float> logits);
  // Removes tokens [begin, end). Exact: keeps [0, begin), recomputes the suffix at its new
  // positions. Shift: moves the suffix rows down and re-rotates K from Kraw (needs keep_kraw).
  void evict(int begin, int end, EvictMode mode);

  // Writes tokens, KV and logits with a header naming the model and a checksum; atomic. meta: the
  // caller's own JSON (e.g. the server's segments), kept in the header so that one atomic write
  // holds everything; load returns it in *meta (null when the file has none).
  void save(const std::filesystem::path& path, const nlohmann::json& meta = nullptr) const;
  static Session load(const std::filesystem::path& path, std::shared_ptr<const Model> model,
                      std::shared_ptr<KvCache> cache, nlohmann::json* meta = nullptr);
  // The same bytes without a file (a shared store keeps them); label names them in errors.
  std::string to_bytes(const nlohmann::json& meta = nullptr) const;
  static Session from_bytes(std::string_view bytes, const std::string& label,
                            std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache,
                            nlohmann::json* meta = nullptr);

  int size() const { return cells_.size(); }
  const std::vector<int32_t>& tokens() const { return cells_.tokens(); }
  const std::vector<float>& logits() const { return logits_; }
  // logits() cut to the ids the model's tokenizer can decode (Model::sampleable_vocab): what a
  // sampler reads. Empty when there are no logits.
  std::span<const float> sampleable_logits() const;
  bool has_logits() const { return logits_valid_; }
  const Model& model() const { return *model_; }
  const std::shared_ptr<const Model>& model_ptr() const { return model_; }
  KvCache& cache() const { return *cache_; }
  const std::vector<int32_t>& blocks() const { return cells_.blocks(); }
  const KvCells& cells() const { return cells_; }

  // For batched decode (runtime/batch): make [size, size + n) writable, then commit after forward.
  void reserve_for_append(int n);
  void commit_append(std::span<const int32_t> tokens);
  // Hybrid models, for a batched call with all_logits (append_batch): where that call records its
  // DeltaNet inputs, so that truncate(n, logits) can drop its tail afterwards. Null on dense
  // models.
  DeltaNetTrail* begin_trail();
  std::vector<float>& mutable_logits() { return logits_; }

  // Keeps the last hidden state (after the final norm) of every position the session's forward
  // calls compute from now on: what the MTP head drafts from (runtime/mtp_draft.h). Off by
  // default; the last 2048 to 4096 positions are kept.
  void keep_hidden(bool on);
  // Rows [from, to) of the kept hidden states ([to - from][dim]); empty when any of them is not
  // kept (computed before keep_hidden, dropped as old, or past size()).
  std::span<const float> hidden(int from, int to) const;
  // For a forward call computing [start, start + n): where its hidden rows go (null when off).
  float* hidden_out(int start, int n);

  // Hybrid models (runtime/session_state.cpp): the live DeltaNet state (null on dense models) and
  // the state checkpoints that truncate and evict restart from and the prefix cache shares.
  RecurrentState* recurrent_state() { return state_.empty() ? nullptr : &state_; }
  const RecurrentState* recurrent_state() const { return state_.empty() ? nullptr : &state_; }
  // Takes a checkpoint at the current position (the end of a request or a session call). A no-op
  // on dense models, on an empty session and where the newest one already is; false when the KV
  // budget cannot hold it (the session goes on without it: a later edit replays further).
  bool checkpoint();
  int n_checkpoints() const { return int(checkpoints_.size()); }
  size_t checkpoint_bytes() const;
  const std::vector<std::shared_ptr<const StateCheckpoint>>& checkpoints() const {
    return checkpoints_;
  }

 private:
  bool hybrid() const { return !state_.empty(); }
  // One forward call; all_logits: [tokens.size()][vocab] or null for the last row only.
  void forward_segment(std::span<const int32_t> tokens, float* all_logits);
  void append_hybrid(std::span<const int32_t> tokens, std::vector<float>* all_logits);
  void decode_checkpoint();
  void truncate_hybrid(int n);
  void evict_hybrid(int begin, int end);
  // Makes the session hold `tokens`, given that its first `unchanged` tokens stay as they are.
  void rewind(const std::vector<int32_t>& tokens, int unchanged);
  // Sliding-window layers (memory/kv_cache.h): drops the windowed rows of blocks this session alone
  // holds that neither its next token nor a truncate back into its last call (which started at
  // `call_start`) reads again.
  void drop_window_rows_behind(int call_start);
  // Keeps the first `keep` tokens and appends `more`: from `keep` on where the windowed rows there
  // are kept, else recomputed from the latest position where they are (KvCache::exact_point).
  void keep_and_append(int keep, std::span<const int32_t> more);

  std::shared_ptr<const Model> model_;
  std::shared_ptr<KvCache> cache_;
  KvCells cells_;  // token ids and the KV cells holding them (memory/kv_cells.h)
  std::vector<float> logits_;
  bool logits_valid_ = false;
  RecurrentState state_;
  // Oldest first. Immutable once taken, so clones share them.
  std::vector<std::shared_ptr<const StateCheckpoint>> checkpoints_;
  // The last call's DeltaNet inputs and the state before it (begin_trail), valid until the
  // session changes otherwise; kept allocated between calls (a state is megabytes).
  DeltaNetTrail trail_;
  RecurrentState trail_before_;
  int trail_base_ = 0;
  bool trail_pending_ = false, trail_valid_ = false;
  struct KeptHidden {
    bool on = false;
    int base = 0;             // the position of rows' first row
    std::vector<float> rows;  // [positions][dim]
  } hidden_;
};

// One decode step for many sessions at once: each weight is read once for the whole batch.
// tokens[i] is appended to sessions[i]; afterwards each session's logits() is updated. Every
// session's result is bit-identical to appending its token alone.
void decode_batch(std::span<Session* const> sessions, std::span<const int32_t> tokens);

// One forward call appending tokens[i] to sessions[i] (prefill of several sequences at once: the
// weights are read once for all of them and matmuls see more rows). Each session's KV and logits
// are bit-identical to appending its tokens alone, hybrid models included (a DeltaNet state does
// not depend on how its tokens are grouped into calls). all_logits: empty, or one per
// session, each null or receiving [tokens[i].size()][vocab] as Session::append's does (speculative
// verification of several sequences in one call).
void append_batch(std::span<Session* const> sessions,
                  std::span<const std::span<const int32_t>> tokens,
                  std::span<std::vector<float>* const> all_logits = {});

}  // namespace fak
