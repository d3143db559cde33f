#include "memory/kv_cache.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/quant.h"

namespace fak {

DType parse_kv_type(const std::string& name) {
  if (name == "f32") return DType::F32;
  if (name == "f16") return DType::F16;
  if (name == "bf16") return DType::BF16;
  if (name == "q8_0") return DType::Q8_0;
  if (name == "q4_0") return DType::Q4_0;
  fail("KV type '" + name + "' is not supported (f32, f16, bf16, q8_0, q4_0)");
}

const char* kv_type_name(DType dtype) {
  return dtype == DType::F16    ? "f16"
         : dtype == DType::BF16 ? "bf16"
         : dtype == DType::Q8_0 ? "q8_0"
         : dtype == DType::Q4_0 ? "q4_0"
                                : "f32";
}

QuantType kv_block_type(DType dtype) {
  return dtype == DType::Q8_0 ? QuantType::Q8_0 : QuantType::Q4_0;
}

size_t kv_bytes_per_token(int n_attention_layers, int n_kv_heads, int head_dim, DType dtype,
                          bool keep_kraw) {
  return size_t(n_attention_layers) * size_t(keep_kraw ? 3 : 2) * size_t(n_kv_heads) *
         dtype_row_bytes(dtype, head_dim);
}

namespace {

std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", double(bytes) / double(1 << 20));
  return buf;
}

}  // namespace

KvCache::KvCache(int n_layers, int n_kv_heads, int head_dim, KvCacheOptions options)
    : n_layers_(n_layers),
      n_kv_heads_(n_kv_heads),
      head_dim_(head_dim),
      kv_dim_(n_kv_heads * head_dim),
      block_size_(options.block_size),
      keep_kraw_(options.keep_kraw),
      max_bytes_(options.max_bytes),
      dtype_(options.dtype),
      storage_(options.storage ? std::move(options.storage) : host_kv_storage()) {
  check(block_size_ > 0 && n_kv_heads_ > 0 && head_dim_ > 0 && n_layers_ >= 0,
        "KvCache: invalid shape");
  check(dtype_ == DType::F32 || dtype_ == DType::F16 || dtype_ == DType::BF16 ||
            dtype_blocked(dtype_),
        "KvCache: storage type must be f32, f16, bf16, q8_0 or q4_0");
  if (dtype_blocked(dtype_) && head_dim_ % 32 != 0)
    fail(std::string("--kv-type ") + kv_type_name(dtype_) +
         " needs a head size that is a multiple of 32 (this model's is " +
         std::to_string(head_dim_) + ")");
  head_bytes_ = dtype_row_bytes(dtype_, head_dim_);
  row_bytes_ = dtype_row_bytes(dtype_, kv_dim_);
  block_bytes_ = size_t(n_layers_) * size_t(planes()) * size_t(block_size_) * row_bytes_;
  // Windowed layers keep their rows in parts of their own (see kv_cache.h); a model whose every
  // layer is windowed keeps them all with its blocks (a part per block would save nothing).
  const std::vector<int>& windows = options.layer_window;
  check(windows.empty() || int(windows.size()) == n_layers_,
        "KvCache: one window per layer (or none)");
  int n_windowed = 0;
  for (int w : windows) n_windowed += w > 0 ? 1 : 0;
  if (n_windowed > 0 && n_windowed < n_layers_) {
    n_window_layers_ = n_windowed;
    windowed_.resize(size_t(n_layers_));
    group_layer_.resize(size_t(n_layers_));
    int counts[2] = {0, 0};
    for (int l = 0; l < n_layers_; ++l) {
      const bool w = windows[size_t(l)] > 0;
      windowed_[size_t(l)] = w;
      group_layer_[size_t(l)] = counts[w ? 1 : 0]++;
      max_window_ = std::max(max_window_, windows[size_t(l)]);
    }
  }
  part_bytes_ = size_t(n_window_layers_) * size_t(planes()) * size_t(block_size_) * row_bytes_;
  full_block_bytes_ = block_bytes_ - part_bytes_;
  blocks_per_slab_ = int(std::clamp<size_t>(options.slab_bytes / std::max<size_t>(block_bytes_, 1),
                                            1, size_t(kMaxBlocksPerSlab)));
  if (max_bytes_ > 0 && block_bytes_ > 0) {
    const size_t fit = max_bytes_ / block_bytes_;
    if (fit == 0)
      fail("KV budget of " + mib(max_bytes_) + " is less than one block (" +
           std::to_string(block_size_) + " tokens = " + mib(block_bytes_) + ")");
    // Whole slabs of equal size must fit the budget: as many slabs as the largest allowed size
    // needs, each then as large as the budget lets them be, so at most one block per slab of the
    // budget goes unused (a 300 MiB budget of 0.56 MiB blocks maps 9 slabs of 59, not 8 of 64).
    const size_t largest = std::min<size_t>(size_t(blocks_per_slab_), fit);
    const size_t n_slabs = (fit + largest - 1) / largest;
    blocks_per_slab_ = int(fit / n_slabs);
    capacity_blocks_ = n_slabs * size_t(blocks_per_slab_);
  }
  head_stride_ = size_t(blocks_per_slab_) * size_t(block_size_) * head_bytes_;
}

KvCache::~KvCache() {
  for (uint8_t* slab : slabs_) storage_->unmap_slab(slab, slab_bytes());
  for (uint8_t* slab : window_slabs_) storage_->unmap_slab(slab, window_slab_bytes());
}

size_t KvCache::capacity_tokens() const {
  if (capacity_blocks_ == SIZE_MAX) return SIZE_MAX;
  const size_t whole = capacity_blocks_ * size_t(block_size_);
  if (n_window_layers_ == 0) return whole;
  // One sequence: the window parts it may hold (whole slabs of them), the rest main slabs.
  const size_t parts = size_t((max_window_ + kWindowCallTokens) / block_size_ + 3);
  const size_t bps = size_t(blocks_per_slab_);
  const size_t window_bytes = (parts + bps - 1) / bps * window_slab_bytes();
  if (window_bytes >= max_bytes_) return whole;
  return std::max(whole, (max_bytes_ - window_bytes) / slab_bytes() * bps * size_t(block_size_));
}

void KvCache::set_reclaimer(const void* owner, Reclaimer reclaimer) {
  reclaimer_owner_ = owner;
  reclaimer_ = std::move(reclaimer);
}

void KvCache::clear_reclaimer(const void* owner) {
  if (reclaimer_owner_ != owner) return;
  reclaimer_owner_ = nullptr;
  reclaimer_ = nullptr;
}

size_t KvCache::offset_in_slab(int32_t index, int group_layer, KvPlane plane, int slot) const {
  // A slab is [layer][plane][head][block][slot][head_dim]: one head's rows of all its blocks are
  // contiguous (see kv_cache.h). A window slab is the same with parts for blocks.
  const size_t region = size_t(n_kv_heads_) * head_stride_;  // one (layer, plane) of the slab
  return (size_t(group_layer) * size_t(planes()) + size_t(plane)) * region +
         (size_t(index % blocks_per_slab_) * size_t(block_size_) + size_t(slot)) * head_bytes_;
}

size_t KvCache::row_offset(int32_t block, int layer, KvPlane plane, int slot) const {
  check(!windowed(layer), "KvCache: a windowed layer's rows are not in the block's slab");
  return offset_in_slab(block, group_layer_.empty() ? layer : group_layer_[size_t(layer)], plane,
                        slot);
}

uint8_t* KvCache::row(int32_t block, int layer, KvPlane plane, int slot) {
  if (plane == KvPlane::Kraw && !keep_kraw_) return nullptr;
  if (n_window_layers_ == 0)
    return slabs_[size_t(block / blocks_per_slab_)] + offset_in_slab(block, layer, plane, slot);
  const int gl = group_layer_[size_t(layer)];
  if (!windowed_[size_t(layer)])
    return slabs_[size_t(block / blocks_per_slab_)] + offset_in_slab(block, gl, plane, slot);
  const int32_t part = part_of_[size_t(block)];
  if (part < 0)
    fail("KvCache: layer " + std::to_string(layer) + "'s rows of block " + std::to_string(block) +
         " were dropped (out of its sliding window)");
  return window_slabs_[size_t(part / blocks_per_slab_)] + offset_in_slab(part, gl, plane, slot);
}

int KvCache::exact_point(std::span<const int32_t> blocks, int n) const {
  if (n_window_layers_ == 0) return n;
  while (n > 0) {
    const int lo = std::max(0, n - max_window_ + 1) / block_size_, hi = (n - 1) / block_size_;
    int missing = -1;
    for (int b = hi; b >= lo && missing < 0; --b)
      if (!has_window_rows(blocks[size_t(b)])) missing = b;
    if (missing < 0) return n;
    n = missing * block_size_;  // the rows before that block may all be there
  }
  return 0;
}

void KvCache::drop_window_rows(int32_t block) {
  check_thread();
  if (n_window_layers_ == 0) return;
  int32_t& part = part_of_[size_t(block)];
  if (part < 0) return;
  window_free_.push_back(part);
  part = -1;
  --parts_in_use_;
}

namespace {

// n f32 values as stored elements of type dt, and back (the rounding is deterministic: Q8_0's
// quantiser gives the same bytes in every kernel variant, quant/quant.h; Q4_0's has one, the
// scalar reference).
void encode(DType dt, const float* x, int n, uint8_t* out) {
  if (dtype_blocked(dt)) {
    quantize_row(kv_block_type(dt), x, out, n);
    return;
  }
  if (dt == DType::F32) {
    std::memcpy(out, x, sizeof(float) * size_t(n));
    return;
  }
  // A head's row (a whole row where the storage is not the host's) through a small buffer.
  uint16_t halves[256];
  for (int i = 0; i < n; i += 256) {
    const int m = n - i < 256 ? n - i : 256;
    (dt == DType::F16 ? f32_to_f16_row : f32_to_bf16_row)(x + i, m, halves);
    std::memcpy(out + 2 * size_t(i), halves, 2 * size_t(m));
  }
}

void decode(DType dt, const uint8_t* in, int n, float* y) {
  if (dtype_blocked(dt)) {
    dequantize_row(kv_block_type(dt), in, y, n);
    return;
  }
  if (dt == DType::F32) {
    std::memcpy(y, in, sizeof(float) * size_t(n));
    return;
  }
  for (int i = 0; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, in + 2 * i, 2);
    y[i] = dt == DType::F16 ? f16_to_f32(v) : bf16_to_f32(v);
  }
}

}  // namespace

void KvCache::store_row(int32_t block, int layer, KvPlane plane, int slot, const float* src) {
  uint8_t* row0 = row(block, layer, plane, slot);
  if (!row0) return;
  if (storage_->host_accessible()) {  // the CPU forward's path: no staging
    for (int h = 0; h < n_kv_heads_; ++h)
      encode(dtype_, src + size_t(h) * size_t(head_dim_), head_dim_,
             row0 + size_t(h) * head_stride_);
    return;
  }
  std::vector<uint8_t> staged(row_bytes_);
  encode(dtype_, src, kv_dim_, staged.data());
  storage_->copy_2d(CopyKind::FromHost, row0, head_stride_, staged.data(), head_bytes_, head_bytes_,
                    size_t(n_kv_heads_));
}

void KvCache::load_row(int32_t block, int layer, KvPlane plane, int slot, float* dst) const {
  const uint8_t* row0 = row(block, layer, plane, slot);
  check(row0 != nullptr, "KvCache: this cache keeps no Kraw");
  if (storage_->host_accessible()) {
    for (int h = 0; h < n_kv_heads_; ++h)
      decode(dtype_, row0 + size_t(h) * head_stride_, head_dim_,
             dst + size_t(h) * size_t(head_dim_));
    return;
  }
  std::vector<uint8_t> staged(row_bytes_);
  storage_->copy_2d(CopyKind::ToHost, staged.data(), head_bytes_, row0, head_stride_, head_bytes_,
                    size_t(n_kv_heads_));
  decode(dtype_, staged.data(), kv_dim_, dst);
}

void KvCache::read_rows(int32_t block, int layer, KvPlane plane, int n, uint8_t* out) const {
  const uint8_t* base = row(block, layer, plane, 0);
  check(base != nullptr, "KvCache: this cache keeps no Kraw");
  if (n <= 0) return;
  // Per head: its n rows are one contiguous run in the block, a column of the token-major output.
  for (int h = 0; h < n_kv_heads_; ++h)
    storage_->copy_2d(CopyKind::ToHost, out + size_t(h) * head_bytes_, row_bytes_,
                      base + size_t(h) * head_stride_, head_bytes_, head_bytes_, size_t(n));
}

void KvCache::write_rows(int32_t block, int layer, KvPlane plane, int n, const uint8_t* in) {
  uint8_t* base = row(block, layer, plane, 0);
  if (!base || n <= 0) return;
  for (int h = 0; h < n_kv_heads_; ++h)
    storage_->copy_2d(CopyKind::FromHost, base + size_t(h) * head_stride_, head_bytes_,
                      in + size_t(h) * head_bytes_, row_bytes_, head_bytes_, size_t(n));
}

// A block's bytes are n_layers x planes x n_kv_heads runs of block_size x head_bytes (one head's
// rows, contiguous in the slab): a payload of n bytes fills them in that order. Calls
// fn(slab address of a (layer, plane)'s first run, payload offset, whole runs there, bytes past
// them) for each (layer, plane) the payload reaches.
template <typename Fn>
void KvCache::for_each_payload_run(int32_t block, size_t n, Fn&& fn) const {
  check(n <= block_bytes_, "KvCache: more bytes than a block holds");
  const size_t run = size_t(block_size_) * head_bytes_;
  size_t at = 0;
  for (int l = 0; l < n_layers_ && at < n; ++l)
    for (int p = 0; p < planes() && at < n; ++p) {
      const size_t left = n - at;
      const size_t whole = std::min(size_t(n_kv_heads_), left / run);
      const size_t tail = whole < size_t(n_kv_heads_) ? std::min(run, left - whole * run) : 0;
      fn(row(block, l, KvPlane(p), 0), at, whole, tail);
      at += whole * run + tail;
    }
}

void KvCache::write_block_bytes(int32_t block, const uint8_t* src, size_t n) {
  const size_t run = size_t(block_size_) * head_bytes_;
  for_each_payload_run(block, n, [&](const uint8_t* slab, size_t at, size_t whole, size_t tail) {
    uint8_t* base = const_cast<uint8_t*>(slab);  // this cache's own slab, written by its owner
    if (whole > 0)
      storage_->copy_2d(CopyKind::FromHost, base, head_stride_, src + at, run, run, whole);
    if (tail > 0)  // the payload ends inside this run
      storage_->copy(CopyKind::FromHost, base + whole * head_stride_, src + at + whole * run, tail);
  });
}

void KvCache::read_block_bytes(int32_t block, uint8_t* dst, size_t n) const {
  const size_t run = size_t(block_size_) * head_bytes_;
  for_each_payload_run(block, n, [&](const uint8_t* base, size_t at, size_t whole, size_t tail) {
    if (whole > 0)
      storage_->copy_2d(CopyKind::ToHost, dst + at, run, base, head_stride_, run, whole);
    if (tail > 0)
      storage_->copy(CopyKind::ToHost, dst + at + whole * run, base + whole * head_stride_, tail);
  });
}

void KvCache::move_row(int32_t dst_block, int dst_slot, int32_t src_block, int src_slot, int layer,
                       KvPlane plane) {
  uint8_t* dst = row(dst_block, layer, plane, dst_slot);
  const uint8_t* src = row(src_block, layer, plane, src_slot);
  if (!dst || !src || dst == src) return;
  // Every head's row, one run per head, head_stride_ apart in both.
  storage_->copy_2d(CopyKind::Inside, dst, head_stride_, src, head_stride_, head_bytes_,
                    size_t(n_kv_heads_));
}

void KvCache::fail_budget() const {
  throw KvBudgetError("KV memory budget spent: all " + std::to_string(capacity_tokens()) +
                      " tokens (" + std::to_string(capacity_blocks_) + " blocks of " +
                      std::to_string(block_size_) + ") that its " + mib(max_bytes_) +
                      " hold are in use by sequences and sessions");
}

void KvCache::map_slab(bool populate) {
  const int32_t first = int32_t(refcounts_.size());
  slabs_.push_back(storage_->map_slab(slab_bytes(), "KV cache"));
  if (populate) storage_->populate(slabs_.back(), slab_bytes());
  mapped_slabs_.store(slabs_.size(), std::memory_order_relaxed);
  refcounts_.resize(refcounts_.size() + size_t(blocks_per_slab_), 0);
  if (n_window_layers_ > 0) part_of_.resize(refcounts_.size(), -1);
  for (int i = blocks_per_slab_ - 1; i >= 0; --i) free_.push_back(first + i);
}

void KvCache::map_window_slab(bool populate) {
  const int32_t first = int32_t(window_slabs_.size()) * blocks_per_slab_;
  window_slabs_.push_back(storage_->map_slab(window_slab_bytes(), "KV cache (windowed layers)"));
  if (populate) storage_->populate(window_slabs_.back(), window_slab_bytes());
  mapped_window_slabs_.store(window_slabs_.size(), std::memory_order_relaxed);
  for (int i = blocks_per_slab_ - 1; i >= 0; --i) window_free_.push_back(first + i);
}

bool KvCache::slab_fits(size_t bytes, size_t mapped_slabs) const {
  if (capacity_blocks_ == SIZE_MAX) return true;
  if (n_window_layers_ == 0)
    return (mapped_slabs + 1) * size_t(blocks_per_slab_) <= capacity_blocks_;
  return mapped_bytes() + bytes <= max_bytes_;
}

size_t KvCache::map_all() {
  // With windowed layers the budget's split between blocks and window parts follows the sequences
  // (one long one needs many blocks and a window's parts, many short ones a part per block), so
  // nothing is mapped ahead: mapping it as whole blocks would leave a long sequence short of
  // blocks with the budget spent on parts it never uses.
  if (capacity_blocks_ == SIZE_MAX || n_window_layers_ > 0) return 0;
  while ((slabs_.size() + 1) * size_t(blocks_per_slab_) <= capacity_blocks_) map_slab(true);
  return mapped_bytes();
}

int32_t KvCache::take_window_part() {
  // A block the reclaimer frees gives its part back, unless its part was dropped already.
  while (window_free_.empty() && !slab_fits(window_slab_bytes(), window_slabs_.size()))
    if (!reclaimer_ || reclaimer_(1) == 0) fail_budget();
  if (window_free_.empty()) map_window_slab(false);
  const int32_t part = window_free_.back();
  window_free_.pop_back();
  ++parts_in_use_;
  return part;
}

void KvCache::check_thread() const {
  const std::thread::id owner = owner_.load(std::memory_order_relaxed);
  if (owner != std::thread::id() && owner != std::this_thread::get_id())
    fail(
        "KvCache: blocks allocated or released off the thread that owns the cache (a data race: "
        "the caller must hand the work to that thread)");
}

int32_t KvCache::allocate() {
  check_thread();
  if (free_.empty() && !slab_fits(slab_bytes(), slabs_.size())) {
    // note: the reclaimer releases blocks through release(), which refills free_.
    if (reclaimer_) reclaimer_(1);
    if (free_.empty()) fail_budget();
  }
  if (free_.empty()) map_slab(false);
  int32_t b = free_.back();
  free_.pop_back();
  refcounts_[size_t(b)] = 1;
  in_use_.fetch_add(1, std::memory_order_relaxed);
  if (n_window_layers_ > 0) {
    try {
      part_of_[size_t(b)] = take_window_part();
    } catch (...) {
      release(b);
      throw;
    }
  }
  return b;
}

void KvCache::retain(int32_t block) {
  check_thread();
  ++refcounts_[size_t(block)];
}

void KvCache::release(int32_t block) {
  check_thread();
  int& rc = refcounts_[size_t(block)];
  check(rc > 0, "KvCache: release of a free block");
  if (--rc == 0) {
    if (n_window_layers_ > 0) drop_window_rows(block);
    free_.push_back(block);
    in_use_.fetch_sub(1, std::memory_order_relaxed);
  }
}

int32_t KvCache::copy_block(int32_t src, int n_rows) {
  int32_t dst = allocate();
  // A copy of a block whose windowed rows were dropped has none either (see kv_cache.h).
  const bool window_rows = has_window_rows(src) || n_rows == 0;
  if (!window_rows) drop_window_rows(dst);
  for (int l = 0; l < n_layers_; ++l)
    for (KvPlane p : {KvPlane::K, KvPlane::V, KvPlane::Kraw})
      if (n_rows > 0 && (p != KvPlane::Kraw || keep_kraw_) && (window_rows || !windowed(l)))
        storage_->copy_2d(CopyKind::Inside, row(dst, l, p, 0), head_stride_, row(src, l, p, 0),
                          head_stride_, head_bytes_ * size_t(n_rows), size_t(n_kv_heads_));
  return dst;
}

}  // namespace fak
