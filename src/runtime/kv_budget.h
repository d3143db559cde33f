// The server's KV memory budget: one hard limit on every KV block (active sequences, the prefix
// cache and kept sessions share one KvCache), sized by default from the model, the context,
// --parallel and the machine.
//
//   bytes per token = attention layers x (K + V + Kraw if kept) x n_kv_heads x head_dim x
//                     bytes per element (f32 4, f16 / bf16 2)
//   default budget  = ctx x parallel x bytes per token         (every sequence at full context;
//                     sliding-window layers: their rows of a window + one call per sequence)
//                   + cache room       (--cache-mem; default one ctx, at least 256 MiB)
//                   + parallel x the MTP head's KV of a context (--draft mtp)
//                     bounded by the machine: available memory (MemAvailable, cgroup limit)
//                     - model weights still in the page cache - a margin (1/8, >= 256 MiB)
//
// The cache room is what keeps an idle agent's long prefix while every slot is busy; while slots
// are idle the prefix cache uses their room too (it gives blocks back on demand, see
// runtime/prefix_cache.h), so the budget is spent on KV, never split in fixed shares.
#pragma once

#include <cstddef>
#include <string>

#include "core/dtype.h"
#include "models/model.h"

namespace fak {

struct KvBudgetOptions {
  DType dtype = DType::F32;
  bool keep_kraw = true;
  int ctx = 0;               // tokens per sequence
  int parallel = 1;          // sequences at once
  size_t total_bytes = 0;    // an explicit budget (--kv-mem); 0 = the default above
  size_t cache_bytes = 0;    // the default's room for cached prefixes (--cache-mem); 0 = above
  size_t available = 0;      // memory the machine can still give; 0 = unknown (no bound)
  size_t weights_bytes = 0;  // model weights that `available` still counts as free (mapped files)
  // Sliding-window layers keep every row (--swa-full); otherwise a sequence holds about a window
  // of their rows (memory/kv_cache.h), and the default counts that.
  bool keep_window_rows = false;
  // --draft mtp: the KV the MTP head of one sequence may map (MtpDrafter::kv_bytes), which lives
  // beside the KV cache; the budget holds it too, for every sequence.
  size_t draft_head_bytes = 0;
};

struct KvBudget {
  int ctx = 0, parallel = 0;   // what the default was sized for
  size_t bytes_per_token = 0;  // every attention layer's rows of one token
  // Of those, the sliding-window layers' (0 without, or with --swa-full): a sequence holds about
  // window_tokens of them.
  size_t window_bytes_per_token = 0;
  size_t window_tokens = 0;
  size_t bytes = 0;        // the budget
  size_t sequences = 0;    // ctx x parallel x bytes per token
  size_t cache_room = 0;   // the default's room for cached prefixes
  size_t draft_heads = 0;  // of bytes: parallel x draft_head_bytes, outside the KV cache
  size_t cache_bytes() const { return bytes - draft_heads; }  // what the KV cache may map
  size_t machine_bound = 0;  // what the machine allows (0 = unknown)
  bool explicit_total = false;
  bool bounded_by_machine = false;  // the default was cut to the machine's bound
  bool over_machine = false;        // an explicit budget above the machine's bound
};

KvBudget plan_kv_budget(const Model& model, const KvBudgetOptions& options);

// The bytes of the model's weight files when the weights are mapped from them (page cache, which
// MemAvailable counts as free although the model needs it); 0 when they live in anonymous memory
// (already out of MemAvailable).
size_t mapped_weight_bytes(const Model& model);

// "36864 bytes/token (24 attention layers x (K + V + Kraw) x 2 KV heads x 64 dims x 2 bytes, bf16)"
std::string describe_bytes_per_token(const Model& model, DType dtype, bool keep_kraw,
                                     bool keep_window_rows = false);

}  // namespace fak
