// Where a KvCache's slabs live and how bytes move in and out of them: host memory (the CPU
// forward) or a GPU's memory (the CUDA forward). The cache does all the addressing (blocks, layers,
// planes, heads, slots) and the bookkeeping (refcounts, budget); a storage only maps slabs and
// copies bytes. So clone, copy-on-write, evict, save and load are one piece of code for every
// device, and a session's bytes are the same wherever they live.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace fak {

enum class CopyKind : uint8_t {
  Inside,    // both pointers in this storage (the regions must not overlap: cudaMemcpy2D)
  ToHost,    // from this storage into host memory
  FromHost,  // from host memory into this storage
};

class KvStorage {
 public:
  virtual ~KvStorage() = default;
  // "host", "cuda:0": what errors and `fak bench` name.
  virtual std::string name() const = 0;
  // Whether the CPU may dereference the storage's pointers (KvCache::row()).
  virtual bool host_accessible() const = 0;
  // Bytes this storage could still map (a GPU's free memory); 0 = unknown (host memory: the
  // machine's memory info answers that).
  virtual size_t available_bytes() const { return 0; }
  // A zero-filled slab of `bytes`; throws fak::Error naming `what` when it cannot be had.
  virtual uint8_t* map_slab(size_t bytes, const char* what) = 0;
  virtual void unmap_slab(uint8_t* slab, size_t bytes) noexcept = 0;
  // Backs a mapped slab with memory now rather than at each page's first write (host memory: a
  // first touch zeroes the page, and on a VM the host may have to supply it, 2-3 ms per MiB).
  virtual void populate(uint8_t* /*slab*/, size_t /*bytes*/) {}
  // `height` runs of `width` bytes, each run `src_pitch` after the previous in the source and
  // `dst_pitch` in the destination (one head's rows of a block <-> a token-major buffer).
  virtual void copy_2d(CopyKind kind, void* dst, size_t dst_pitch, const void* src,
                       size_t src_pitch, size_t width, size_t height) = 0;
  void copy(CopyKind kind, void* dst, const void* src, size_t bytes) {
    copy_2d(kind, dst, bytes, src, bytes, bytes, 1);
  }
};

// Anonymous host memory advised for huge pages (core/anon_memory).
std::shared_ptr<KvStorage> host_kv_storage();

}  // namespace fak
