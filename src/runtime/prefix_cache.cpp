#include "runtime/prefix_cache.h"

#include <algorithm>

#include "core/error.h"

namespace fak {

// One node per cached block: the edge from its parent is the block's block_size token ids.
struct PrefixCache::Node {
  Node* parent = nullptr;
  int32_t block = -1;  // -1 at the root
  uint64_t last_used = 0;
  std::map<std::vector<int32_t>, std::unique_ptr<Node>> children;
};

PrefixCache::PrefixCache(std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache, size_t max_bytes)
    : model_(std::move(model)), cache_(std::move(cache)), max_bytes_(max_bytes) {
  stats_.max_bytes = max_bytes;
}

PrefixCache::~PrefixCache() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Node*> stack;
  for (auto& [_, root] : roots_) stack.push_back(root.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (n->block >= 0) cache_->release(n->block);
    for (auto& [_, c] : n->children) stack.push_back(c.get());
  }
}

Session PrefixCache::acquire(const std::string& partition, std::span<const int32_t> tokens, int* reused) {
  const int bs = cache_->block_size();
  std::vector<int32_t> blocks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.lookups;
    // note: hybrid models also need the recurrent state at the match point; until checkpoints are
    // stored in the tree they take no reuse rather than a wrong one.
    const size_t max_blocks = model_->config().is_hybrid() || tokens.empty() ? 0 : (tokens.size() - 1) / size_t(bs);
    auto it = roots_.find(partition);
    Node* node = it == roots_.end() ? nullptr : it->second.get();
    const uint64_t now = ++clock_;
    for (size_t i = 0; node && i < max_blocks; ++i) {
      std::vector<int32_t> key(tokens.begin() + long(i) * bs, tokens.begin() + long(i + 1) * bs);
      auto c = node->children.find(key);
      if (c == node->children.end()) break;
      node = c->second.get();
      node->last_used = now;
      cache_->retain(node->block);  // the session's reference
      blocks.push_back(node->block);
    }
    const int n_reused = int(blocks.size()) * bs;
    stats_.tokens_reused += n_reused;
    stats_.tokens_computed += int64_t(tokens.size()) - n_reused;
    if (n_reused > 0) ++stats_.hits;
  }
  const size_t n_reused = blocks.size() * size_t(bs);
  if (reused) *reused = int(n_reused);
  Session s = Session::from_blocks(model_, cache_, {tokens.begin(), tokens.begin() + long(n_reused)},
                                   std::move(blocks));
  s.append(tokens.subspan(n_reused));
  return s;
}

void PrefixCache::insert(const std::string& partition, const Session& session) {
  if (model_->config().is_hybrid()) return;  // see acquire
  check(&session.cache() == cache_.get(), "PrefixCache::insert: session uses another KV cache");
  const int bs = cache_->block_size();
  const auto& tokens = session.tokens();
  const size_t full = tokens.size() / size_t(bs);
  std::lock_guard<std::mutex> lock(mu_);
  auto& root = roots_[partition];
  if (!root) root = std::make_unique<Node>();
  Node* node = root.get();
  const uint64_t now = ++clock_;
  for (size_t i = 0; i < full; ++i) {
    std::vector<int32_t> key(tokens.begin() + long(i) * bs, tokens.begin() + long(i + 1) * bs);
    auto& child = node->children[key];
    if (!child) {
      child = std::make_unique<Node>();
      child->parent = node;
      child->block = session.blocks()[i];
      cache_->retain(child->block);
      ++stats_.blocks;
    }
    child->last_used = now;
    node = child.get();
  }
  evict_to_budget();
}

void PrefixCache::evict_to_budget() {
  while (stats_.blocks * cache_->block_bytes() > max_bytes_) {
    // Least recently used leaf that no session holds (refcount 1 = only the tree).
    Node* victim = nullptr;
    std::vector<Node*> stack;
    for (auto& [_, root] : roots_) stack.push_back(root.get());
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      if (n->children.empty() && n->block >= 0 && cache_->refcount(n->block) == 1 &&
          (!victim || n->last_used < victim->last_used))
        victim = n;
      for (auto& [_, c] : n->children) stack.push_back(c.get());
    }
    if (!victim) return;  // everything left is in use
    cache_->release(victim->block);
    --stats_.blocks;
    ++stats_.blocks_evicted;
    Node* parent = victim->parent;
    for (auto it = parent->children.begin(); it != parent->children.end(); ++it)
      if (it->second.get() == victim) {
        parent->children.erase(it);
        break;
      }
  }
}

void PrefixCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t saved = max_bytes_;
  max_bytes_ = 0;
  evict_to_budget();
  max_bytes_ = saved;
}

PrefixCacheStats PrefixCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PrefixCacheStats s = stats_;
  s.bytes = s.blocks * cache_->block_bytes();
  return s;
}

}  // namespace fak
