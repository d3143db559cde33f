// Byte-pair encoding of one pre-token: start from one symbol per byte, then repeatedly merge the
// adjacent pair with the lowest merge rank (leftmost first on ties) until no pair has a merge --
// the order HF tokenizers' Word::merge_all applies them in.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

namespace fak {

class Bpe {
 public:
  struct Merge {
    int32_t left, right, result;  // ids; rank is the position in the list
  };
  enum class Mode { kAuto, kScan, kHeap };  // kScan/kHeap force one algorithm (tests compare them)

  Bpe() = default;
  // byte_ids[b] is the id of the one-byte token for byte b, or -1 (such bytes are dropped, as HF
  // does when a character is missing from the vocab and there is no unk token). For a pair listed
  // twice the later rank wins, as in HF's merge map.
  Bpe(const std::array<int32_t, 256>& byte_ids, const std::vector<Merge>& merges);

  // Appends the ids of `piece` (raw bytes).
  void encode(std::string_view piece, std::vector<int32_t>& out, Mode mode = Mode::kAuto) const;
  // Merges the symbols out[start, end) in place (a character-level BPE's initial symbols: one per
  // character, or its byte-fallback tokens), by the same rule as encode.
  void merge(std::vector<int32_t>& out, size_t start, Mode mode = Mode::kAuto) const;

 private:
  struct Slot {
    uint64_t key;  // left << 32 | right; kEmpty when unused
    int32_t rank, result;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  // Rank and result of merging (left, right), or nullptr.
  const Slot* find(int32_t left, int32_t right) const {
    uint64_t key = (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
    for (size_t i = hash(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s;
      if (s.key == kEmpty) return nullptr;
    }
  }
  size_t hash(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }

  // Both merge symbols[0, n) in place and return the new count.
  size_t merge_scan(int32_t* symbols, size_t n) const;
  size_t merge_heap(int32_t* symbols, size_t n) const;

  std::array<int32_t, 256> byte_ids_{};
  std::vector<Slot> slots_;  // open addressing, power-of-two size, at most half full
  size_t mask_ = 0;
  int shift_ = 64;
};

}  // namespace fak
