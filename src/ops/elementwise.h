// Element-wise ops over long arrays (a prefill's MLP has T x hidden of them): split over the
// threads in cache-sized chunks. Each element's result depends on that element alone, so the
// split never changes a bit.
#pragma once

#include <algorithm>

namespace fak {

// fn(i) for every i in [0, n).
template <class Fn>
void for_each_element(int n, Fn&& fn) {
  constexpr int kChunk = 16 * 1024;
  const int chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int c = 0; c < chunks; ++c) {
    const int end = std::min(n, (c + 1) * kChunk);
    for (int i = c * kChunk; i < end; ++i) fn(i);
  }
}

}  // namespace fak
