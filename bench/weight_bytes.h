// Benchmark weights in the memory the engine keeps a model's weights in (core/anon_memory.h: 2 MiB
// pages where transparent huge pages allow), so a kernel's read rate compares with `fak bench` and
// with membw_bench's pool, which use it too. (A std::vector's pages are 4 KiB: streaming hundreds
// of MiB through them adds a TLB miss every 4 KiB that neither of those has.)
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/anon_memory.h"

namespace fak {

struct WeightBytes {
  explicit WeightBytes(size_t bytes) : mem(bytes, "benchmark weights") {}
  uint8_t* data() const { return mem.data(); }
  size_t size() const { return mem.size(); }
  uint8_t& operator[](size_t i) const { return mem.data()[i]; }
  AnonMemory mem;
};

}  // namespace fak
