// Page-aligned anonymous memory, advised for transparent huge pages: large buffers that are read
// in full every step (model weights, KV cache slabs) take one TLB entry per 2 MiB instead of per
// 4 KiB. The advice is ignored where THP is off; the memory works the same either way.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fak {

class AnonMemory {
 public:
  AnonMemory() = default;
  // Zero-filled; throws fak::Error naming `what` when the memory cannot be mapped.
  AnonMemory(size_t bytes, const char* what);
  ~AnonMemory();
  AnonMemory(AnonMemory&& o) noexcept : data_(o.data_), size_(o.size_), mapped_(o.mapped_) {
    o.data_ = nullptr;
    o.size_ = o.mapped_ = 0;
  }
  AnonMemory& operator=(AnonMemory&& o) noexcept;
  AnonMemory(const AnonMemory&) = delete;
  AnonMemory& operator=(const AnonMemory&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // bytes mapped from data_ (size_ rounded up to whole pages)
};

}  // namespace fak
