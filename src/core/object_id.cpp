#include "core/object_id.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>

namespace fak {

std::string new_object_id(std::string_view prefix) {
  // Unique in the process (the counter) and unlikely to repeat across restarts (the seed): ids
  // name tool calls an agent sends back, so two replies must never share one.
  static const uint64_t seed = [] {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd() ^
           uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  }();
  static std::atomic<uint64_t> counter{0};
  const uint64_t k = ++counter;
  uint64_t x = seed + 0x9e3779b97f4a7c15ull * k;
  // splitmix64: the ids look random, so no client comes to depend on their order.
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx%08llx", (unsigned long long)x,
                (unsigned long long)(k & 0xffffffffull));
  return std::string(prefix) + buf;
}

}  // namespace fak
