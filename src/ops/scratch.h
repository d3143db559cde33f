// Per-thread scratch memory for kernels: grown on demand, reused across calls, never shrunk.
// Defined in a baseline file so that kernel files built for wider ISAs need no std containers (see
// core/isa_namespace.h for why that matters).
#pragma once

#include <cstddef>

namespace fak::kernels {

// Scratch slots: a kernel uses its own so nested users never share a buffer.
enum class ScratchSlot : int {
  kFloatPanel,
  kPaddedActivations,
  kQuantPanel,
  kAttention,
  kAmxAccumulators,
  kBf16Rows,
  kCount
};

// At least `bytes` bytes, 64-byte aligned, owned by the calling thread; the pointer stays valid
// until the same thread asks the same slot for more. Contents are unspecified.
void* thread_scratch(ScratchSlot slot, size_t bytes);

}  // namespace fak::kernels
