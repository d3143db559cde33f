#include "memory/kv_storage.h"

#include <sys/mman.h>

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "core/anon_memory.h"

namespace fak {

namespace {

class HostKvStorage final : public KvStorage {
 public:
  std::string name() const override { return "host"; }
  bool host_accessible() const override { return true; }

  uint8_t* map_slab(size_t bytes, const char* what) override {
    AnonMemory memory(bytes, what);
    uint8_t* p = memory.data();
    std::lock_guard lock(mutex_);
    slabs_.emplace(p, std::move(memory));
    return p;
  }

  void populate(uint8_t* slab, size_t bytes) override {
    // One write per page faults it in (the whole 2 MiB where huge pages back the slab); writing
    // the zero it holds changes nothing. MADV_POPULATE_WRITE (Linux 5.14) does the same in the
    // kernel, without a trap per page.
#ifdef MADV_POPULATE_WRITE
    if (madvise(slab, bytes, MADV_POPULATE_WRITE) == 0) return;
#endif
    for (size_t at = 0; at < bytes; at += 4096) reinterpret_cast<volatile uint8_t*>(slab)[at] = 0;
  }

  void unmap_slab(uint8_t* slab, size_t) noexcept override {
    std::lock_guard lock(mutex_);
    slabs_.erase(slab);
  }

  void copy_2d(CopyKind, void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
               size_t width, size_t height) override {
    auto* d = static_cast<uint8_t*>(dst);
    const auto* s = static_cast<const uint8_t*>(src);
    if (dst_pitch == width && src_pitch == width) {
      std::memmove(d, s, width * height);
      return;
    }
    for (size_t i = 0; i < height; ++i) std::memmove(d + i * dst_pitch, s + i * src_pitch, width);
  }

 private:
  // note: one storage may serve several caches (and threads building them), hence the lock;
  // slabs are mapped a few times per run, never per token.
  std::mutex mutex_;
  std::unordered_map<uint8_t*, AnonMemory> slabs_;
};

}  // namespace

std::shared_ptr<KvStorage> host_kv_storage() {
  return std::make_shared<HostKvStorage>();
}

}  // namespace fak
