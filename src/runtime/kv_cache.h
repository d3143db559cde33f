// KV storage in fixed-size blocks, shared between sequences by reference count (copy-on-write is
// the owner's job: a block with refcount > 1 is never written). Per attention layer a block holds
// K after RoPE, V, and optionally Kraw (K before RoPE, kept so a shift-eviction can re-rotate
// survivors once from the original instead of composing rotations).
//
// Layout of one block: for each layer, [K | V | Kraw] each [block_size][kv_dim] f32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace fak {

struct KvCacheOptions {
  int block_size = 32;
  bool keep_kraw = true;
  size_t max_bytes = 0;  // 0 = no limit
};

class KvCache {
 public:
  KvCache(int n_layers, int kv_dim, KvCacheOptions options = {});

  int32_t allocate();  // refcount 1; throws fak::Error when the memory budget is spent
  void retain(int32_t block);
  void release(int32_t block);  // frees at refcount 0
  int refcount(int32_t block) const { return refcounts_[size_t(block)]; }
  // A new block (refcount 1) holding a copy of the first n_rows rows of src in every layer.
  int32_t copy_block(int32_t src, int n_rows);

  float* k(int32_t block, int layer) { return base(block, layer); }
  float* v(int32_t block, int layer) { return base(block, layer) + layer_plane(); }
  float* kraw(int32_t block, int layer) { return keep_kraw_ ? base(block, layer) + 2 * layer_plane() : nullptr; }
  const float* k(int32_t block, int layer) const { return const_cast<KvCache*>(this)->k(block, layer); }
  const float* v(int32_t block, int layer) const { return const_cast<KvCache*>(this)->v(block, layer); }
  const float* kraw(int32_t block, int layer) const { return const_cast<KvCache*>(this)->kraw(block, layer); }

  int block_size() const { return block_size_; }
  int n_layers() const { return n_layers_; }
  int kv_dim() const { return kv_dim_; }
  bool keeps_kraw() const { return keep_kraw_; }
  size_t block_bytes() const { return block_floats_ * sizeof(float); }
  size_t blocks_in_use() const { return in_use_; }
  size_t bytes_in_use() const { return in_use_ * block_bytes(); }
  size_t max_bytes() const { return max_bytes_; }

 private:
  size_t layer_plane() const { return size_t(block_size_) * size_t(kv_dim_); }
  float* base(int32_t block, int layer);

  int n_layers_, kv_dim_, block_size_;
  bool keep_kraw_;
  size_t max_bytes_;
  size_t block_floats_;
  static constexpr int kBlocksPerSlab = 16;
  std::vector<std::unique_ptr<float[]>> slabs_;
  std::vector<int> refcounts_;
  std::vector<int32_t> free_;
  size_t in_use_ = 0;
};

}  // namespace fak
