// The mask-part cache; see part_cache.h.
#include "grammar/part_cache.h"

#include <cstring>

namespace fak::grammar {

bool MaskKey::operator==(const MaskKey& other) const {
  return scope == other.scope && std::memcmp(&frame, &other.frame, sizeof(Frame)) == 0;
}

size_t MaskKeyHash::operator()(const MaskKey& key) const {
  // FNV-1a over the 24 bytes: small, and frames differ in few bytes.
  uint64_t h = 1469598103934665603ull;
  const auto mix = [&](const void* p, size_t n) {
    const auto* bytes = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  };
  mix(&key.scope, sizeof key.scope);
  mix(&key.frame, sizeof key.frame);
  return size_t(h);
}

std::shared_ptr<const MaskPart> PartCache::find(const MaskKey& key) const {
  std::lock_guard lock(mutex_);
  auto it = parts_.find(key);
  return it == parts_.end() ? nullptr : it->second;
}

std::shared_ptr<const MaskPart> PartCache::store(const MaskKey& key, MaskPart part) const {
  auto shared = std::make_shared<const MaskPart>(std::move(part));
  std::lock_guard lock(mutex_);
  auto [it, inserted] = parts_.emplace(key, shared);
  if (!inserted) return it->second;  // another thread got there first; same contents
  if (shared->pinned) return shared;
  bytes_ += shared->bytes();
  if (bytes_ > budget_) {
    std::erase_if(parts_, [](const auto& entry) { return !entry.second->pinned; });
    bytes_ = 0;
  }
  return shared;
}

}  // namespace fak::grammar
