#include "runtime/kv_cache.h"

#include <cstring>

#include "core/error.h"

namespace fak {

KvCache::KvCache(int n_layers, int kv_dim, KvCacheOptions options)
    : n_layers_(n_layers),
      kv_dim_(kv_dim),
      block_size_(options.block_size),
      keep_kraw_(options.keep_kraw),
      max_bytes_(options.max_bytes) {
  check(block_size_ > 0 && kv_dim_ > 0 && n_layers_ >= 0, "KvCache: invalid shape");
  block_floats_ = size_t(n_layers_) * size_t(keep_kraw_ ? 3 : 2) * layer_plane();
}

float* KvCache::base(int32_t block, int layer) {
  float* slab = slabs_[size_t(block / kBlocksPerSlab)].get();
  return slab + size_t(block % kBlocksPerSlab) * block_floats_ +
         size_t(layer) * size_t(keep_kraw_ ? 3 : 2) * layer_plane();
}

int32_t KvCache::allocate() {
  if (max_bytes_ && (in_use_ + 1) * block_bytes() > max_bytes_)
    fail("KV cache is full: " + std::to_string(max_bytes_ >> 20) + " MiB budget (" +
         std::to_string(in_use_) + " blocks of " + std::to_string(block_size_) + " tokens in use)");
  if (free_.empty()) {
    int32_t first = int32_t(refcounts_.size());
    slabs_.emplace_back(new float[kBlocksPerSlab * block_floats_]);
    refcounts_.resize(refcounts_.size() + kBlocksPerSlab, 0);
    for (int i = kBlocksPerSlab - 1; i >= 0; --i) free_.push_back(first + i);
  }
  int32_t b = free_.back();
  free_.pop_back();
  refcounts_[size_t(b)] = 1;
  ++in_use_;
  return b;
}

void KvCache::retain(int32_t block) { ++refcounts_[size_t(block)]; }

void KvCache::release(int32_t block) {
  int& rc = refcounts_[size_t(block)];
  check(rc > 0, "KvCache: release of a free block");
  if (--rc == 0) {
    free_.push_back(block);
    --in_use_;
  }
}

int32_t KvCache::copy_block(int32_t src, int n_rows) {
  int32_t dst = allocate();
  const size_t row_bytes = size_t(kv_dim_) * sizeof(float);
  for (int l = 0; l < n_layers_; ++l) {
    std::memcpy(k(dst, l), k(src, l), row_bytes * size_t(n_rows));
    std::memcpy(v(dst, l), v(src, l), row_bytes * size_t(n_rows));
    if (keep_kraw_) std::memcpy(kraw(dst, l), kraw(src, l), row_bytes * size_t(n_rows));
  }
  return dst;
}

}  // namespace fak
