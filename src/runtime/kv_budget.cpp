#include "runtime/kv_budget.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "memory/kv_cache.h"
#include "runtime/model_cache.h"

namespace fak {

namespace {

constexpr size_t kMinMargin = size_t(256) << 20;
// The default room for cached prefixes is at least what the prefix cache had before it shared one
// budget with the sequences (--cache-mem 256), so small contexts keep as much cached as they did.
constexpr size_t kMinCacheRoom = size_t(256) << 20;

// The model's sliding-window layers whose rows a cache drops (runtime/model_cache.h): how many, and
// their longest window; {0, 0} where none are dropped (no windows, all windowed, or a hybrid).
struct DroppedWindows {
  int layers = 0, window = 0;
};
DroppedWindows dropped_windows(const Model& model) {
  DroppedWindows d;
  for (int w : kv_layer_windows(model)) {
    d.layers += w > 0 ? 1 : 0;
    d.window = std::max(d.window, w);
  }
  if (d.layers == model.n_attention_layers()) d = {};  // the cache keeps them with their blocks
  return d;
}

}  // namespace

KvBudget plan_kv_budget(const Model& model, const KvBudgetOptions& o) {
  KvBudget b;
  const ModelConfig& c = model.config();
  b.bytes_per_token = kv_bytes_per_token(model.n_attention_layers(), c.n_kv_heads, c.head_dim,
                                         o.dtype, o.keep_kraw);
  b.ctx = std::max(o.ctx, 1);
  b.parallel = std::max(o.parallel, 1);
  const size_t ctx = size_t(b.ctx);
  // A sequence of n tokens: every layer's rows of each, less the windowed layers' rows behind
  // their window (memory/kv_cache.h), plus a slab of each kind for the cache's rounding.
  size_t per_sequence = ctx * b.bytes_per_token;
  if (const DroppedWindows d = dropped_windows(model); d.layers > 0 && !o.keep_window_rows) {
    constexpr size_t kBlock = 32, kSlabBlocks = 64;  // KvCacheOptions' default, a slab's most
    b.window_bytes_per_token =
        b.bytes_per_token / size_t(model.n_attention_layers()) * size_t(d.layers);
    b.window_tokens = size_t(d.window) + size_t(kWindowCallTokens) + 2 * kBlock;
    if (b.window_tokens < ctx)
      per_sequence = std::min(per_sequence, ctx * (b.bytes_per_token - b.window_bytes_per_token) +
                                                b.window_tokens * b.window_bytes_per_token +
                                                kSlabBlocks * kBlock * b.bytes_per_token);
  }
  b.sequences = size_t(b.parallel) * per_sequence;
  b.cache_room = o.cache_bytes ? o.cache_bytes : std::max(kMinCacheRoom, per_sequence);
  b.draft_heads = size_t(b.parallel) * o.draft_head_bytes;
  if (o.available > 0) {
    // Leave the rest of the process (activations, logits, sessions' state) and the system a
    // margin; weights mapped from their files are page cache that MemAvailable counts as free.
    const size_t spare = o.available - std::min(o.available, o.weights_bytes);
    const size_t margin = std::max(kMinMargin, spare / 8);
    b.machine_bound = spare - std::min(spare, margin);
  }
  if (o.total_bytes > 0) {
    b.explicit_total = true;
    b.bytes = o.total_bytes;
    b.over_machine = o.available > 0 && b.bytes > b.machine_bound;
  } else {
    b.bytes = b.sequences + b.cache_room + b.draft_heads;
    if (o.available > 0 && b.bytes > b.machine_bound) {
      b.bytes = b.machine_bound;
      b.bounded_by_machine = true;
    }
  }
  if (b.draft_heads >= b.bytes)
    fail("KV budget " + std::to_string(b.bytes >> 20) + " MiB" +
         (b.explicit_total ? " (--kv-mem)" : " (what this machine can spare)") +
         " does not hold the MTP draft heads' KV of " + std::to_string(b.draft_heads >> 20) +
         " MiB (--parallel " + std::to_string(b.parallel) + " x ctx " + std::to_string(b.ctx) +
         "): raise --kv-mem, or lower --parallel or --ctx");
  return b;
}

size_t mapped_weight_bytes(const Model& model) {
  if (std::string(model.weights_memory()) != "mmap") return 0;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path& p = model.path();
  if (fs::is_regular_file(p, ec)) return size_t(fs::file_size(p, ec));
  size_t total = 0;
  for (const auto& e : fs::directory_iterator(p, ec)) {
    const auto ext = e.path().extension();
    if (e.is_regular_file(ec) && (ext == ".safetensors" || ext == ".gguf"))
      total += size_t(e.file_size(ec));
  }
  return total;
}

std::string describe_bytes_per_token(const Model& model, DType dtype, bool keep_kraw,
                                     bool keep_window_rows) {
  const ModelConfig& c = model.config();
  const size_t bpt =
      kv_bytes_per_token(model.n_attention_layers(), c.n_kv_heads, c.head_dim, dtype, keep_kraw);
  std::string line = std::to_string(bpt) + " bytes/token (" +
                     std::to_string(model.n_attention_layers()) + " attention layers x (K + V" +
                     (keep_kraw ? " + Kraw" : "") + ") x " + std::to_string(c.n_kv_heads) +
                     " KV heads x " + std::to_string(c.head_dim) + " dims x " +
                     (dtype == DType::Q8_0   ? std::string("34/32")
                      : dtype == DType::Q4_0 ? std::string("18/32")
                                             : std::to_string(dtype_size(dtype))) +
                     " bytes, " + kv_type_name(dtype) + ")";
  if (const DroppedWindows d = dropped_windows(model); d.layers > 0 && !keep_window_rows)
    line += "; " + std::to_string(d.layers) + " of the layers attend to a window of " +
            std::to_string(d.window) + " and keep about " +
            std::to_string(d.window + kWindowCallTokens) +
            " tokens' rows a sequence (--swa-full: all)";
  return line;
}

}  // namespace fak
