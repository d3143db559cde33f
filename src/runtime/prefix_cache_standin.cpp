// STAND-IN for the real PrefixCache (being written on main as src/runtime/prefix_cache.cpp): a flat
// list of cloned sessions per partition, searched linearly. Only here so the server branch builds
// and its caching tests run before that lands; delete this file when merging main.
#include <algorithm>

#include "core/error.h"
#include "runtime/prefix_cache.h"

namespace fak {

struct PrefixCache::Node {
  std::vector<Session> entries;  // oldest first
};

namespace {
constexpr size_t kMaxEntriesPerPartition = 16;
}

PrefixCache::PrefixCache(std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache,
                         size_t max_bytes)
    : model_(std::move(model)), cache_(std::move(cache)), max_bytes_(max_bytes) {
  stats_.max_bytes = max_bytes;
}

PrefixCache::~PrefixCache() = default;

Session PrefixCache::acquire(const std::string& partition, std::span<const int32_t> tokens,
                             int* reused) {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.lookups;
  const int bs = cache_->block_size();
  const int cap = tokens.empty() ? 0 : (int(tokens.size()) - 1) / bs * bs;
  const Session* best = nullptr;
  int best_len = 0;
  if (auto it = roots_.find(partition); it != roots_.end()) {
    for (const Session& s : it->second->entries) {
      int n = 0;
      const int lim = std::min(cap, s.size());
      while (n < lim && s.tokens()[size_t(n)] == tokens[size_t(n)]) ++n;
      n = n / bs * bs;
      if (n > best_len) best_len = n, best = &s;
    }
  }
  Session out(model_, cache_);
  if (best) {
    out = best->clone();
    out.truncate(best_len);
    ++stats_.hits;
  }
  out.append(tokens.subspan(size_t(best_len)));
  stats_.tokens_reused += best_len;
  stats_.tokens_computed += int64_t(tokens.size()) - best_len;
  if (reused) *reused = best_len;
  return out;
}

void PrefixCache::insert(const std::string& partition, const Session& session) {
  std::lock_guard<std::mutex> lock(mu_);
  if (session.size() < cache_->block_size()) return;
  auto& node = roots_[partition];
  if (!node) node = std::make_unique<Node>();
  node->entries.push_back(session.clone());
  if (node->entries.size() > kMaxEntriesPerPartition) {
    node->entries.erase(node->entries.begin());
    ++stats_.blocks_evicted;
  }
}

void PrefixCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  roots_.clear();
}

PrefixCacheStats PrefixCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PrefixCacheStats s = stats_;
  s.blocks = 0;
  for (const auto& [_, node] : roots_)
    for (const Session& e : node->entries) s.blocks += e.blocks().size();
  s.bytes = s.blocks * cache_->block_bytes();
  return s;
}

}  // namespace fak
