// Per-thread kernel scratch (ops/scratch.h): aligned, reused while big enough, grown on demand,
// and separate per slot and per thread.
#include "ops/scratch.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>

namespace fak::kernels {
namespace {

TEST(Scratch, AlignedReusedAndGrown) {
  void* a = thread_scratch(ScratchSlot::kFloatPanel, 1000);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  std::memset(a, 0xAB, 1000);
  EXPECT_EQ(thread_scratch(ScratchSlot::kFloatPanel, 10), a);  // big enough: the same buffer
  void* b = thread_scratch(ScratchSlot::kFloatPanel, size_t(3) << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 64, 0u);
  std::memset(b, 0xCD, size_t(3) << 20);  // the whole grown size is usable
  void* other = thread_scratch(ScratchSlot::kQuantPanel, 1000);
  EXPECT_NE(other, b);  // slots never share a buffer
}

TEST(Scratch, ThreadsGetTheirOwnBuffers) {
  void* mine = thread_scratch(ScratchSlot::kAttention, 4096);
  void* theirs = nullptr;
  std::thread t([&] { theirs = thread_scratch(ScratchSlot::kAttention, 4096); });
  t.join();
  EXPECT_NE(mine, theirs);
}

}  // namespace
}  // namespace fak::kernels
