// KV storage in fixed-size blocks, shared between sequences by reference count (copy-on-write is
// the owner's job: a block with refcount > 1 is never written). Per attention layer a block holds
// K after RoPE, V, and optionally Kraw (K before RoPE, kept so a shift-eviction can re-rotate
// survivors once from the original instead of composing rotations).
//
// Rows are stored as f32, f16, bf16, or in ggml's q8_0 / q4_0 blocks (KvCacheOptions::dtype); the
// forward pass writes f32 rows through store_row and attention reads them in place (the blocked
// types through their dot products). Conversions are deterministic, so the reuse stack's
// bit-exactness holds for every storage type.
//
// Layout: blocks live in slabs of blocks_per_slab_, each slab [layer][plane][head][block][slot]
// [head_dim] (planes K | V | Kraw): one KV head's rows of a block are contiguous, and so are its
// rows of consecutive blocks. Attention reads one head per work unit, and with rows interleaving
// the heads two threads reading different heads of the same rows stream half the bandwidth (the
// prefetchers fetch the other head's lines too); with each block's rows on their own, a decode
// step's reads were runs of one block (4 KiB in f16) far apart, which the hardware prefetchers
// barely follow: a cloned prefix's blocks are now one run. So a token's row is not contiguous:
// row() is its head-0 part, head h is head_stride() bytes further, and store_row / load_row /
// read_rows / write_rows convert to and from whole [kv_dim] rows.
//
// Storage: the slabs live in a KvStorage (memory/kv_storage.h), host memory by default or a GPU's
// for the CUDA forward; every byte the cache moves goes through it, so clone, evict, save and load
// work on either. row() pointers point into the storage: the CPU dereferences them only where
// storage().host_accessible().
//
// Sliding-window layers (KvCacheOptions::layer_window): a windowed layer's rows live apart from the
// other layers', in window parts of their own (same layout, same head stride), one per block while
// the block has them. drop_window_rows() gives a block's part back once no one will read its rows
// again (a session past the window, runtime/session.h), so a windowed layer holds about its window
// of KV per sequence, as llama.cpp's iSWA cache does, and the block keeps its other layers' rows.
//
// Budget: with max_bytes set, the cache never maps more than max_bytes of slabs (what a slab maps
// becomes resident as its blocks are written, so mapped bytes are what the budget counts, not
// blocks in use). When every block it may map is taken, allocate() first asks the reclaimer (the
// prefix cache, which gives back blocks no sequence holds) and only then throws KvBudgetError.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "memory/kv_cells.h"
#include "memory/kv_storage.h"
#include "quant/quant_type.h"

namespace fak {

// On a cache with windowed layers, a session's forward calls take at most this many tokens
// (runtime/session.h), so one sequence holds at most max_window() + this of their rows (and a block
// either side): what capacity_tokens() and the server's budget (runtime/kv_budget.h) count.
constexpr int kWindowCallTokens = 1024;

struct KvCacheOptions {
  int block_size = 32;
  bool keep_kraw = true;     // drop to save a third of the memory when shift-eviction is not needed
  size_t max_bytes = 0;      // the most the cache maps, slabs included (0 = no limit)
  DType dtype = DType::F32;  // F32, F16 or BF16
  // The most a slab (the unit the cache maps memory in) may take: it holds at least one block and
  // at most 64 (see blocks_per_slab()).
  size_t slab_bytes = size_t(128) << 20;
  // Where the slabs live; null: host memory.
  std::shared_ptr<KvStorage> storage = nullptr;
  // Per layer (empty: none): > 0, the layer attends to its last N positions only, and its rows of
  // a block may be dropped (drop_window_rows) once out of every reader's window.
  std::vector<int> layer_window = {};
  // For make_kv_cache (runtime/model_cache.h): leave layer_window empty, keeping every row of a
  // windowed layer (--swa-full: rewinds and exact quarantine far back then never replay).
  bool keep_window_rows = false;
};

enum class KvPlane : uint8_t { K, V, Kraw };

// "f32" / "f16" / "bf16" / "q8_0" / "q4_0" -> DType; throws fak::Error naming the accepted values.
DType parse_kv_type(const std::string& name);
const char* kv_type_name(DType dtype);
// The ggml block format of a blocked KV type's rows (Q8_0 or Q4_0: dtype_blocked).
QuantType kv_block_type(DType dtype);

// One token's KV in every attention layer: K + V (+ Kraw) rows of n_kv_heads * head_dim elements.
size_t kv_bytes_per_token(int n_attention_layers, int n_kv_heads, int head_dim, DType dtype,
                          bool keep_kraw);

// The KV memory budget is spent: every block the budget allows is held by a sequence or session.
// The server answers 503 (retry later), not 400: the request itself may be fine.
class KvBudgetError : public Error {
 public:
  using Error::Error;
};

class KvCache : public BlockPool {
 public:
  KvCache(int n_layers, int n_kv_heads, int head_dim, KvCacheOptions options = {});
  ~KvCache() override;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // Refcount 1. When the budget is spent, asks the reclaimer for a block first; throws
  // KvBudgetError when it has none to give.
  int32_t allocate() override;
  void retain(int32_t block) override;
  void release(int32_t block) override;  // frees at refcount 0
  int refcount(int32_t block) const override { return refcounts_[size_t(block)]; }
  // A new block (refcount 1) holding a copy of the first n_rows rows of src in every layer.
  int32_t copy_block(int32_t src, int n_rows) override;

  // Head 0 of row `slot` (0..block_size-1) of one plane (head h: + h * head_stride()); nullptr for
  // Kraw when it is not kept.
  uint8_t* row(int32_t block, int layer, KvPlane plane, int slot);
  const uint8_t* row(int32_t block, int layer, KvPlane plane, int slot) const {
    return const_cast<KvCache*>(this)->row(block, layer, plane, slot);
  }
  void store_row(int32_t block, int layer, KvPlane plane, int slot, const float* src);
  void load_row(int32_t block, int layer, KvPlane plane, int slot, float* dst) const;
  // Rows [0, n) of one plane of a block as stored elements, token-major ([n][kv_dim]): the form
  // session files keep, whatever the block layout.
  void read_rows(int32_t block, int layer, KvPlane plane, int n, uint8_t* out) const;
  void write_rows(int32_t block, int layer, KvPlane plane, int n, const uint8_t* in);
  // A block as plain storage for something that is not KV (runtime state checkpoints,
  // memory/state_checkpoint.h): n <= block_bytes() bytes written or read in a fixed order over the
  // block's rows, whatever the KV type (no conversion: what goes in comes out bit for bit).
  void write_block_bytes(int32_t block, const uint8_t* src, size_t n);
  void read_block_bytes(int32_t block, uint8_t* dst, size_t n) const;
  // Windowed layers (see above): whether a block still has their rows, and dropping them (the
  // block keeps its other layers'). A block is allocated with them; a copy of a block without
  // them has none either. Rows of a dropped part cannot be read or written (a fak::Error).
  bool has_windows() const { return n_window_layers_ > 0; }
  int max_window() const { return max_window_; }
  bool windowed(int layer) const { return windowed_.empty() ? false : windowed_[size_t(layer)]; }
  bool has_window_rows(int32_t block) const {
    return n_window_layers_ == 0 || part_of_[size_t(block)] >= 0;
  }
  void drop_window_rows(int32_t block);
  // The latest position p <= n at which a sequence over `blocks` can go on exactly: every windowed
  // row the token at p reads ([p - max_window() + 1, p)) is still there. n without windows.
  int exact_point(std::span<const int32_t> blocks, int n) const;
  size_t window_parts_in_use() const { return parts_in_use_; }
  // Copies one row (every head) of a plane; the two may be in the same block.
  void move_row(int32_t dst_block, int dst_slot, int32_t src_block, int src_slot, int layer,
                KvPlane plane);

  KvStorage& storage() const { return *storage_; }
  // Slab i's first byte in the storage (device kernels address rows from these, like row()).
  uint8_t* slab(size_t i) const { return slabs_[i]; }
  size_t n_slabs() const { return slabs_.size(); }
  // Byte offset of head 0 of row `slot` of a block within its slab (row() = slab + this).
  size_t row_offset(int32_t block, int layer, KvPlane plane, int slot) const;

  int block_size() const override { return block_size_; }
  int n_layers() const { return n_layers_; }
  int kv_dim() const { return kv_dim_; }
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return head_dim_; }
  size_t head_bytes() const { return head_bytes_; }    // one head of one row; rows of a head follow
  size_t head_stride() const { return head_stride_; }  // from head h of a row to head h + 1
  int blocks_per_slab() const { return blocks_per_slab_; }
  DType dtype() const { return dtype_; }
  size_t row_bytes() const { return row_bytes_; }  // one token's row, all heads
  bool keeps_kraw() const { return keep_kraw_; }
  size_t block_bytes() const { return block_bytes_; }
  // Safe to read from any thread (metrics), like mapped_bytes().
  size_t blocks_in_use() const { return in_use_.load(std::memory_order_relaxed); }
  // Every layer's rows of a block (windowed layers' included).
  size_t bytes_in_use() const {
    return blocks_in_use() * full_block_bytes_ + window_parts_in_use() * part_bytes_;
  }
  size_t max_bytes() const { return max_bytes_; }
  // Blocks the budget allows (whole slabs within max_bytes); SIZE_MAX without a budget.
  size_t capacity_blocks() const { return capacity_blocks_; }
  // Tokens the budget holds: capacity_blocks() of them, or with windowed layers the most one
  // sequence can hold, its windowed rows being about a window's (kWindowCallTokens).
  size_t capacity_tokens() const;
  // One slab of the layers that keep every row (the whole block when none is windowed).
  size_t slab_bytes() const { return size_t(blocks_per_slab_) * full_block_bytes_; }
  size_t mapped_bytes() const {
    return mapped_slabs_.load(std::memory_order_relaxed) * slab_bytes() +
           mapped_window_slabs_.load(std::memory_order_relaxed) * window_slab_bytes();
  }

  // Maps every slab the budget allows and backs it with memory now, so that no step pays for the
  // first touch of its KV (a server's choice, as llama.cpp clears its whole KV at start; a cache
  // without a budget maps as it goes). Returns the bytes mapped.
  size_t map_all();

  // Gives back up to n unreferenced blocks held elsewhere (the prefix cache) when the budget is
  // spent; returns how many it freed. One at a time: `owner` names who set it, so a reclaimer
  // that goes away clears only its own. It runs inside allocate(), on the allocating thread.
  using Reclaimer = std::function<size_t(size_t n)>;
  void set_reclaimer(const void* owner, Reclaimer reclaimer);
  void clear_reclaimer(const void* owner);

  // The cache is not thread-safe: a server gives it to one thread (its scheduler's). Once bound,
  // allocate / retain / release from any other thread fail loudly (a fak::Error; inside a
  // destructor the process ends) instead of racing: a lost refcount frees a block still in use,
  // which a second sequence then overwrites. A default id unbinds.
  void bind_thread(std::thread::id owner) { owner_.store(owner, std::memory_order_relaxed); }

 private:
  // write_block_bytes / read_block_bytes walk a payload over a block's runs with this.
  template <typename Fn>
  void for_each_payload_run(int32_t block, size_t n, Fn&& fn) const;
  int planes() const { return keep_kraw_ ? 3 : 2; }
  [[noreturn]] void fail_budget() const;
  void map_slab(bool populate);         // one more slab, its blocks free
  void map_window_slab(bool populate);  // one more slab of window parts, all free
  size_t window_slab_bytes() const { return size_t(blocks_per_slab_) * part_bytes_; }
  // Whether one more slab of `bytes` stays within the budget (windowed caches count bytes: their
  // two kinds of slab fill it together).
  bool slab_fits(size_t bytes, size_t mapped_slabs) const;
  int32_t take_window_part();
  // The byte offset of row `slot` of item `index` (a block, or a window part) in its slab, for the
  // layer that is `group_layer`-th of its kind.
  size_t offset_in_slab(int32_t index, int group_layer, KvPlane plane, int slot) const;

  int n_layers_, n_kv_heads_, head_dim_, kv_dim_, block_size_;
  bool keep_kraw_;
  size_t max_bytes_;
  size_t capacity_blocks_ = SIZE_MAX;
  DType dtype_;
  size_t row_bytes_, block_bytes_, head_bytes_, head_stride_;
  // Up to 64 blocks (2048 tokens of 32-token blocks), fewer where that would pass slab_bytes. A
  // slab is mapped whole and one block touches every (layer, plane, head) region of it, so the
  // cache's resident memory grows a slab at a time, not a block at a time: 36 MiB for Qwen2.5-0.5B
  // with f16 KV (64 blocks); Qwen2.5-7B with f32 KV and Kraw would take 352 MiB at the first
  // token, and gets 23 blocks (126 MiB). Fewer blocks per slab cut a cloned prefix's runs of
  // contiguous rows (5-agent decode steps at 16 blocks: up to 16% slower at the 0.5B shape), which
  // the largest models, whose steps are mostly weight reads, feel least.
  // With a budget, slabs are made a little smaller where that lets whole slabs fill it (see the
  // constructor), so what the budget allows is what gets mapped.
  static constexpr int kMaxBlocksPerSlab = 64;
  int blocks_per_slab_;
  std::shared_ptr<KvStorage> storage_;
  std::vector<uint8_t*> slabs_;  // host: huge-page advised, a step reads them all
  std::vector<int> refcounts_;
  std::vector<int32_t> free_;
  std::atomic<size_t> in_use_{0}, mapped_slabs_{0}, mapped_window_slabs_{0};
  // Windowed layers: which layers (and each one's index among its kind), their parts' slabs and
  // free list, and each block's part (-1: dropped).
  std::vector<uint8_t> windowed_;
  std::vector<int> group_layer_;
  int n_window_layers_ = 0, max_window_ = 0;
  size_t full_block_bytes_ = 0, part_bytes_ = 0;
  std::vector<uint8_t*> window_slabs_;
  std::vector<int32_t> window_free_, part_of_;
  size_t parts_in_use_ = 0;
  void check_thread() const;
  std::atomic<std::thread::id> owner_{};
  const void* reclaimer_owner_ = nullptr;
  Reclaimer reclaimer_;
};

}  // namespace fak
