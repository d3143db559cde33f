#include "core/anon_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/error.h"

namespace fak {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
}

AnonMemory::AnonMemory(size_t bytes, const char* what) {
  if (bytes == 0) return;
  // Map a huge page more than needed and trim both ends, so the buffer starts on a 2 MiB
  // boundary: THP only backs aligned 2 MiB ranges.
  const size_t page = 4096;
  const size_t want = (bytes + page - 1) / page * page;
  const size_t span = want + (want >= kHugePage ? kHugePage : 0);
  void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    fail(std::string(what) + ": cannot allocate " + std::to_string(bytes) + " bytes (" +
         std::strerror(errno) + ")");
  auto* base = static_cast<uint8_t*>(p);
  uint8_t* start = base;
  if (span > want) {
    start = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(base) + kHugePage - 1) &
                                       ~(kHugePage - 1));
    if (start > base) munmap(base, size_t(start - base));
    const size_t tail = size_t(base + span - (start + want));
    if (tail) munmap(start + want, tail);
    madvise(start, want, MADV_HUGEPAGE);  // advisory
  }
  data_ = start;
  size_ = bytes;
  mapped_ = want;
}

AnonMemory::~AnonMemory() {
  if (data_) munmap(data_, mapped_);
}

AnonMemory& AnonMemory::operator=(AnonMemory&& o) noexcept {
  if (this != &o) {
    if (data_) munmap(data_, mapped_);
    data_ = o.data_;
    size_ = o.size_;
    mapped_ = o.mapped_;
    o.data_ = nullptr;
    o.size_ = o.mapped_ = 0;
  }
  return *this;
}

}  // namespace fak
