// Per-thread kernel scratch (ops/scratch.h).
#include "ops/scratch.h"

#include <cstdlib>
#include <new>

namespace fak::kernels {

namespace {

struct Buffer {
  void* data = nullptr;
  size_t bytes = 0;
  ~Buffer() { std::free(data); }
};

}  // namespace

void* thread_scratch(ScratchSlot slot, size_t bytes) {
  thread_local Buffer buffers[int(ScratchSlot::kCount)];
  Buffer& b = buffers[int(slot)];
  if (b.bytes < bytes) {
    std::free(b.data);
    // Round up to whole cache lines (aligned_alloc needs a multiple of the alignment) and grow by
    // half again, so slowly growing requests do not reallocate every call.
    const size_t want = ((bytes + bytes / 2) + 63) / 64 * 64;
    b.data = std::aligned_alloc(64, want);
    if (!b.data) {
      b.bytes = 0;
      throw std::bad_alloc();
    }
    b.bytes = want;
  }
  return b.data;
}

}  // namespace fak::kernels
