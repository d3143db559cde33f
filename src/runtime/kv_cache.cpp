#include "runtime/kv_cache.h"

#include <cstring>

#include "core/error.h"

namespace fak {

DType parse_kv_type(const std::string& name) {
  if (name == "f32") return DType::F32;
  if (name == "f16") return DType::F16;
  if (name == "bf16") return DType::BF16;
  fail("KV type '" + name + "' is not supported (f32, f16, bf16)");
}

KvCache::KvCache(int n_layers, int kv_dim, KvCacheOptions options)
    : n_layers_(n_layers),
      kv_dim_(kv_dim),
      block_size_(options.block_size),
      keep_kraw_(options.keep_kraw),
      max_bytes_(options.max_bytes),
      dtype_(options.dtype) {
  check(block_size_ > 0 && kv_dim_ > 0 && n_layers_ >= 0, "KvCache: invalid shape");
  check(dtype_ == DType::F32 || dtype_ == DType::F16 || dtype_ == DType::BF16,
        "KvCache: storage type must be f32, f16 or bf16");
  row_bytes_ = size_t(kv_dim_) * dtype_size(dtype_);
  block_bytes_ = size_t(n_layers_) * size_t(planes()) * size_t(block_size_) * row_bytes_;
}

uint8_t* KvCache::row(int32_t block, int layer, KvPlane plane, int slot) {
  if (plane == KvPlane::Kraw && !keep_kraw_) return nullptr;
  uint8_t* slab = slabs_[size_t(block / kBlocksPerSlab)].data();
  const size_t plane_bytes = size_t(block_size_) * row_bytes_;
  return slab + size_t(block % kBlocksPerSlab) * block_bytes_ +
         (size_t(layer) * size_t(planes()) + size_t(plane)) * plane_bytes +
         size_t(slot) * row_bytes_;
}

void KvCache::store_row(int32_t block, int layer, KvPlane plane, int slot, const float* src) {
  uint8_t* dst = row(block, layer, plane, slot);
  if (!dst) return;
  switch (dtype_) {
    case DType::F32:
      std::memcpy(dst, src, row_bytes_);
      return;
    case DType::F16:
      for (int i = 0; i < kv_dim_; ++i) {
        uint16_t h = f32_to_f16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    default:
      for (int i = 0; i < kv_dim_; ++i) {
        uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
  }
}

void KvCache::load_row(int32_t block, int layer, KvPlane plane, int slot, float* dst) const {
  const uint8_t* src = row(block, layer, plane, slot);
  check(src != nullptr, "KvCache: this cache keeps no Kraw");
  switch (dtype_) {
    case DType::F32:
      std::memcpy(dst, src, row_bytes_);
      return;
    case DType::F16:
      for (int i = 0; i < kv_dim_; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      return;
    default:
      for (int i = 0; i < kv_dim_; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return;
  }
}

int32_t KvCache::allocate() {
  if (max_bytes_ && (in_use_ + 1) * block_bytes() > max_bytes_)
    fail("KV cache is full: " + std::to_string(max_bytes_ >> 20) + " MiB budget (" +
         std::to_string(in_use_) + " blocks of " + std::to_string(block_size_) + " tokens in use)");
  if (free_.empty()) {
    int32_t first = int32_t(refcounts_.size());
    slabs_.emplace_back(kBlocksPerSlab * block_bytes_, "KV cache");
    refcounts_.resize(refcounts_.size() + kBlocksPerSlab, 0);
    for (int i = kBlocksPerSlab - 1; i >= 0; --i) free_.push_back(first + i);
  }
  int32_t b = free_.back();
  free_.pop_back();
  refcounts_[size_t(b)] = 1;
  ++in_use_;
  return b;
}

void KvCache::retain(int32_t block) {
  ++refcounts_[size_t(block)];
}

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
  for (int l = 0; l < n_layers_; ++l)
    for (KvPlane p : {KvPlane::K, KvPlane::V, KvPlane::Kraw})
      if (n_rows > 0 && (p != KvPlane::Kraw || keep_kraw_))
        std::memcpy(row(dst, l, p, 0), row(src, l, p, 0), row_bytes_ * size_t(n_rows));
  return dst;
}

}  // namespace fak
