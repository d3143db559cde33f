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
#include "models/model.h"

namespace fak {

// Hybrid models: a long append runs as forward calls of this many tokens (a multiple of the
// DeltaNet chunk, 64), and a cold checkpoint sits at a multiple of it (runtime/session_state.cpp).
constexpr int kStateCheckpointInterval = 128;

// A hybrid session's DeltaNet state at a position, with the next-token logits there. Immutable once
// taken: shared by clones and by the prefix cache.
struct StateCheckpoint {
  int pos = 0;
  RecurrentState state;
  std::vector<float> logits;  // next-token logits at pos
  // The state one cold append of tokens [0, pos) computes (every forward call before pos on that
  // append's grid), so any prompt that starts with those tokens can restart from it exactly.
  bool cold = false;
  size_t bytes() const { return state.bytes() + logits.size() * sizeof(float); }
};

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
  // [tokens.size()][vocab] (perplexity, parity).
  void append(std::span<const int32_t> tokens, std::vector<float>* all_logits = nullptr);

  // A session over already-computed blocks that cover `tokens` exactly (whole blocks). The caller
  // hands over one reference per block. logits() is invalid until the next append.
  static Session from_blocks(std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache,
                             std::vector<int32_t> tokens, std::vector<int32_t> blocks);

  // Hybrid models: a session over blocks covering `tokens` (whole blocks, one reference each handed
  // over) whose DeltaNet state is `cp` (cold, cp->pos == tokens.size()). The next append continues
  // the cold append, so the session equals one cold append of everything (prefix cache hits).
  static Session from_checkpoint(std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache,
                                 std::vector<int32_t> tokens, std::vector<int32_t> blocks,
                                 std::shared_ptr<const StateCheckpoint> cp);

  // A new session sharing every block with this one: O(blocks), no KV copied.
  Session clone() const;
  // Keeps the first n tokens; logits() becomes the next-token logits after token n - 1.
  void truncate(int n);
  // Dense models: truncate(n) without its forward call, for a caller that already holds the
  // next-token logits after token n - 1 (a row of append's all_logits: speculative decoding drops
  // rejected draft tokens this way). By the forward's determinism the result is bit-identical to
  // truncate(n). Throws on hybrid models, whose recurrent state cannot be cut.
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
  // new_append: the tokens start an append of their own (false: they continue the previous one,
  // which hybrid replays must know to reproduce its grouping).
  void commit_append(std::span<const int32_t> tokens, bool new_append = true);
  std::vector<float>& mutable_logits() { return logits_; }

  // Hybrid models (runtime/session_state.cpp): the live DeltaNet state (null on dense models), the
  // start of every forward call so far (the grouping a replay must reproduce), and the state
  // checkpoints that truncate/evict restart from.
  RecurrentState* recurrent_state() { return state_.empty() ? nullptr : &state_; }
  const std::vector<int32_t>& segment_starts() const { return starts_; }
  int n_checkpoints() const { return int(checkpoints_.size()); }
  size_t checkpoint_bytes() const;
  const std::vector<std::shared_ptr<const StateCheckpoint>>& checkpoints() const {
    return checkpoints_;
  }

 private:
  bool hybrid() const { return !state_.empty(); }
  // One forward call; all_logits: [tokens.size()][vocab] or null for the last row only.
  void forward_segment(std::span<const int32_t> tokens, float* all_logits, bool new_append);
  void append_hybrid(std::span<const int32_t> tokens, std::vector<float>* all_logits);
  void truncate_hybrid(int n);
  void evict_hybrid(int begin, int end);
  void maybe_checkpoint(int segment_tokens);
  void rewind(const std::vector<int32_t>& tokens, const std::vector<int32_t>& starts,
              int unchanged);

  std::shared_ptr<const Model> model_;
  std::shared_ptr<KvCache> cache_;
  KvCells cells_;  // token ids and the KV cells holding them (memory/kv_cells.h)
  std::vector<float> logits_;
  bool logits_valid_ = false;
  RecurrentState state_;
  std::vector<int32_t> starts_;
  // Immutable once taken, so clones share them.
  std::vector<std::shared_ptr<const StateCheckpoint>> checkpoints_;
  // Set by from_checkpoint: the next append continues the append the checkpoint ended inside.
  bool continue_append_ = false;
};

// One decode step for many sessions at once: each weight is read once for the whole batch.
// tokens[i] is appended to sessions[i]; afterwards each session's logits() is updated. Every
// session's result is bit-identical to appending its token alone.
void decode_batch(std::span<Session* const> sessions, std::span<const int32_t> tokens);

// One forward call appending tokens[i] to sessions[i] (prefill of several sequences at once: the
// weights are read once for all of them and matmuls see more rows). Each session's KV and logits
// are bit-identical to appending its tokens alone. Multi-token appends to hybrid sessions run one
// by one (their recurrent-state checkpoints are taken per append). all_logits: empty, or one per
// session, each null or receiving [tokens[i].size()][vocab] as Session::append's does (speculative
// verification of several sequences in one call).
void append_batch(std::span<Session* const> sessions,
                  std::span<const std::span<const int32_t>> tokens,
                  std::span<std::vector<float>* const> all_logits = {});

}  // namespace fak
