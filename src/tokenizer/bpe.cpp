// BPE merges by rank; see bpe.h.
#include "tokenizer/bpe.h"

#include <algorithm>
#include <climits>

namespace fak {
namespace {

// Up to this many symbols a linear scan for the best pair beats a heap (and most pre-tokens are
// a few bytes long); longer pieces (a line of 5,000 'x') take the O(n log n) heap.
constexpr size_t kScanMax = 64;

}  // namespace

Bpe::Bpe(const std::array<int32_t, 256>& byte_ids, const std::vector<Merge>& merges)
    : byte_ids_(byte_ids) {
  size_t cap = 4;
  int bits = 2;
  while (cap < merges.size() * 2) {
    cap <<= 1;
    ++bits;
  }
  slots_.assign(cap, Slot{kEmpty, 0, 0});
  mask_ = cap - 1;
  shift_ = 64 - bits;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Merge& m = merges[rank];
    uint64_t key = (uint64_t(uint32_t(m.left)) << 32) | uint32_t(m.right);
    size_t i = hash(key);
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
    slots_[i] = Slot{key, static_cast<int32_t>(rank), m.result};
  }
}

size_t Bpe::merge_scan(int32_t* sym, size_t n) const {
  int32_t rank[kScanMax], result[kScanMax];  // pair i is (sym[i], sym[i + 1])
  auto fill = [&](size_t i) {
    const Slot* s = find(sym[i], sym[i + 1]);
    rank[i] = s ? s->rank : INT32_MAX;
    result[i] = s ? s->result : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) fill(i);
  while (n > 1) {
    size_t best = 0;
    int32_t best_rank = INT32_MAX;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (rank[i] < best_rank) {  // strict: the leftmost of equal ranks wins
        best_rank = rank[i];
        best = i;
      }
    }
    if (best_rank == INT32_MAX) break;
    sym[best] = result[best];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      sym[i] = sym[i + 1];
      rank[i - 1] = rank[i];
      result[i - 1] = result[i];
    }
    --n;
    if (best > 0) fill(best - 1);
    if (best + 1 < n) fill(best);
  }
  return n;
}

size_t Bpe::merge_heap(int32_t* sym, size_t n) const {
  struct Entry {
    int32_t rank;
    int32_t pos;
    // std heap functions build a max-heap: invert so the lowest (rank, pos) comes out first.
    bool operator<(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<int32_t> prev(n), next(n);
  std::vector<uint8_t> alive(n, 1);
  std::vector<Entry> heap;
  heap.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
    if (i + 1 < n) {
      if (const Slot* s = find(sym[i], sym[i + 1])) heap.push_back({s->rank, int32_t(i)});
    }
  }
  std::make_heap(heap.begin(), heap.end());
  auto push = [&](int32_t pos) {
    if (const Slot* s = find(sym[pos], sym[next[pos]])) {
      heap.push_back({s->rank, pos});
      std::push_heap(heap.begin(), heap.end());
    }
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    Entry top = heap.back();
    heap.pop_back();
    int32_t pos = top.pos;
    if (!alive[pos] || next[pos] < 0) continue;
    int32_t right = next[pos];
    // An entry is stale when either symbol changed since it was pushed; a rank names one pair.
    const Slot* s = find(sym[pos], sym[right]);
    if (!s || s->rank != top.rank) continue;
    sym[pos] = s->result;
    alive[right] = 0;
    next[pos] = next[right];
    if (next[pos] >= 0) prev[next[pos]] = pos;
    if (prev[pos] >= 0) push(prev[pos]);
    if (next[pos] >= 0) push(pos);
  }
  size_t out = 0;
  for (int32_t i = 0; i >= 0; i = next[i]) sym[out++] = sym[i];
  return out;
}

void Bpe::encode(std::string_view piece, std::vector<int32_t>& out, Mode mode) const {
  size_t start = out.size();
  for (unsigned char b : piece) {
    if (byte_ids_[b] >= 0) out.push_back(byte_ids_[b]);
  }
  merge(out, start, mode);
}

void Bpe::merge(std::vector<int32_t>& out, size_t start, Mode mode) const {
  size_t n = out.size() - start;
  if (n < 2 || slots_.empty()) return;
  bool scan = mode == Mode::kScan || (mode == Mode::kAuto && n <= kScanMax);
  if (scan && n > kScanMax) scan = false;  // the scan keeps its pair table on the stack
  n = scan ? merge_scan(out.data() + start, n) : merge_heap(out.data() + start, n);
  out.resize(start + n);
}

}  // namespace fak
