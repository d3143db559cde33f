// Element-wise ops over long arrays (a prefill's MLP has T x hidden of them): split over the
// threads in cache-sized chunks. Each element's result depends on that element alone, so the
// split never changes a bit.
#pragma once

#include <algorithm>

namespace fak {

// fn(begin, end) for the chunks of [0, n), in parallel when there are several.
template <class Fn>
void for_each_chunk(int n, Fn&& fn) {
  constexpr int kChunk = 16 * 1024;
  const int chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int c = 0; c < chunks; ++c) fn(c * kChunk, std::min(n, (c + 1) * kChunk));
}

}  // namespace fak
