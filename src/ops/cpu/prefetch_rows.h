// Software prefetch of the weight rows a prefill kernel reads next, spread over the tiles that use
// the rows before them. Include only from files compiled with at least -mavx2.
//
// note: a prefill kernel reads each stretch of weights once from memory (its first token tile),
// then many times from cache. Left to the hardware prefetcher the first read stalls: in
// `perf annotate` of the 0.5B F16 pp256, the loop widening a row block sat on its loads for 12% of
// the prefill. Asking for the next stretch a few lines at a time while the current one is computed
// on hides that wait behind the multiply-adds.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "core/isa_namespace.h"
#include "ops/matmul.h"

namespace fak::kernels {
inline namespace FAK_ISA_NS {

// Prefetches share `part` of `parts` of the cache lines of rows [first, first + count) of w, bytes
// [b0, b1) of each row; calling it for part = 0 .. parts-1 covers every line once.
inline void prefetch_rows_part(const WeightMatrix& w, int64_t first, int64_t count, size_t b0,
                               size_t b1, int64_t part, int64_t parts) {
  if (count <= 0 || b1 <= b0 || parts <= 0) return;
  const int64_t lines_per_row = int64_t((b1 - b0 + 63) / 64);
  const int64_t total = count * lines_per_row;
  const int64_t begin = total * part / parts, end = total * (part + 1) / parts;
  for (int64_t l = begin; l < end; ++l) {
    const uint8_t* line = w.row(first + l / lines_per_row) + b0 + size_t(l % lines_per_row) * 64;
    _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
  }
}

}  // namespace FAK_ISA_NS
}  // namespace fak::kernels
