// libFuzzer target for the GGUF reader: any input must parse or throw fak::Error, never crash, read
// out of bounds or allocate without bound. Touches every tensor's first and last byte and every
// metadata value so ASan sees the ranges the reader vouched for.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "io/gguf.h"


namespace {

uint64_t touch(const fak::GgufArray& a) {
  uint64_t h = a.size();
  for (const auto& s : a.strings) h += s.size();
  for (const auto& inner : a.arrays) h += touch(inner);
  for (size_t i = 0; i < a.raw.size(); ++i) h += a.raw[i];
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const fak::GgufFile f =
        fak::GgufFile::from_memory(std::span<const uint8_t>(data, size), "fuzz");
    uint64_t h = 0;
    for (const fak::GgufKv& kv : f.metadata()) {
      h += kv.key.size() + kv.value.s.size() + kv.value.u;
      if (kv.value.type == fak::GgufType::ARRAY) h += touch(kv.value.array);
    }
    for (const fak::GgufTensor& t : f.tensors()) {
      h += uint64_t(t.n_elements());
      if (t.nbytes > 0) h += t.data[0] + t.data[t.nbytes - 1];
      if (f.tensor(t.name) == nullptr) __builtin_trap();
    }
    volatile uint64_t sink = h;
    (void)sink;
  } catch (const fak::Error&) {
  }
  return 0;
}
