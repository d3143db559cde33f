#include "memory/state_checkpoint.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace fak {

namespace {

// Walks a payload made of several host ranges as one run of bytes, a block at a time.
template <typename Part, typename Fn>
void for_each_block(std::span<const Part> parts, size_t block_bytes, Fn&& fn) {
  size_t part = 0, off = 0;
  for (size_t b = 0;; ++b) {
    // [ranges of this block]: up to block_bytes bytes taken from the parts in order.
    size_t want = block_bytes;
    std::vector<std::pair<decltype(parts[0].data()), size_t>> pieces;
    while (want > 0 && part < parts.size()) {
      const size_t n = std::min(want, parts[part].size() - off);
      if (n > 0) pieces.emplace_back(parts[part].data() + off, n);
      off += n;
      want -= n;
      if (off == parts[part].size()) {
        ++part;
        off = 0;
      }
    }
    if (pieces.empty()) return;
    fn(b, pieces);
  }
}

}  // namespace

size_t StateCheckpoint::blocks_for(const KvCache& cache, size_t payload_bytes) {
  check(cache.block_bytes() > 0, "state checkpoint: the KV cache has no room per block");
  return (payload_bytes + cache.block_bytes() - 1) / cache.block_bytes();
}

void StateCheckpoint::store(std::span<const std::span<const char>> parts) {
  size_t total = 0;
  for (const auto& p : parts) total += p.size();
  const size_t n = blocks_for(*cache_, total);
  blocks_.reserve(n);
  for (size_t i = 0; i < n; ++i) blocks_.push_back(cache_->allocate());  // ~ releases on a throw
  std::vector<uint8_t> staged;
  for_each_block(parts, cache_->block_bytes(), [&](size_t b, const auto& pieces) {
    if (pieces.size() == 1) {
      cache_->write_block_bytes(blocks_[b], reinterpret_cast<const uint8_t*>(pieces[0].first),
                                pieces[0].second);
      return;
    }
    staged.clear();
    for (const auto& [ptr, len] : pieces) staged.insert(staged.end(), ptr, ptr + len);
    cache_->write_block_bytes(blocks_[b], staged.data(), staged.size());
  });
}

void StateCheckpoint::load(std::span<const std::span<char>> parts) const {
  std::vector<uint8_t> staged;
  for_each_block(parts, cache_->block_bytes(), [&](size_t b, const auto& pieces) {
    if (pieces.size() == 1) {
      cache_->read_block_bytes(blocks_[b], reinterpret_cast<uint8_t*>(pieces[0].first),
                               pieces[0].second);
      return;
    }
    size_t total = 0;
    for (const auto& pc : pieces) total += pc.second;
    staged.resize(total);
    cache_->read_block_bytes(blocks_[b], staged.data(), total);
    size_t at = 0;
    for (const auto& [ptr, len] : pieces) {
      std::memcpy(ptr, staged.data() + at, len);
      at += len;
    }
  });
}

std::shared_ptr<const StateCheckpoint> StateCheckpoint::take(const std::shared_ptr<KvCache>& cache,
                                                             int pos, const RecurrentState& state,
                                                             std::span<const float> logits) {
  std::shared_ptr<StateCheckpoint> cp(
      new StateCheckpoint(cache, pos, state.bytes(), logits.size()));
  const std::span<const char> parts[2] = {
      {reinterpret_cast<const char*>(state.data.data()), state.bytes()},
      {reinterpret_cast<const char*>(logits.data()), logits.size() * sizeof(float)}};
  cp->store(parts);
  return cp;
}

std::shared_ptr<const StateCheckpoint> StateCheckpoint::from_payload(
    const std::shared_ptr<KvCache>& cache, int pos, std::span<const char> bytes,
    size_t state_bytes) {
  check(bytes.size() >= state_bytes && (bytes.size() - state_bytes) % sizeof(float) == 0,
        "state checkpoint: a payload of " + std::to_string(bytes.size()) + " bytes for a " +
            std::to_string(state_bytes) + "-byte state");
  std::shared_ptr<StateCheckpoint> cp(
      new StateCheckpoint(cache, pos, state_bytes, (bytes.size() - state_bytes) / sizeof(float)));
  const std::span<const char> parts[1] = {bytes};
  cp->store(parts);
  return cp;
}

StateCheckpoint::~StateCheckpoint() {
  for (int32_t b : blocks_) cache_->release(b);
}

void StateCheckpoint::restore(RecurrentState& state, std::vector<float>& logits) const {
  check(state.bytes() == state_bytes_, "state checkpoint: the state does not fit the model");
  logits.resize(n_logits_);
  const std::span<char> parts[2] = {
      {reinterpret_cast<char*>(state.data.data()), state_bytes_},
      {reinterpret_cast<char*>(logits.data()), n_logits_ * sizeof(float)}};
  load(parts);
}

void StateCheckpoint::payload(std::vector<char>& out) const {
  out.resize(state_bytes_ + n_logits_ * sizeof(float));
  const std::span<char> parts[1] = {{out.data(), out.size()}};
  load(parts);
}

}  // namespace fak
