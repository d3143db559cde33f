#include "runtime/prefix_cache.h"

#include <algorithm>

#include "core/error.h"

namespace fak {

// One node per cached block: the edge from its parent is the block's block_size token ids.
struct PrefixCache::Node {
  Node* parent = nullptr;
  int32_t block = -1;  // -1 at the root
  int depth = 0;       // blocks from the root: the node's block ends at position depth * block_size
  uint64_t last_used = 0;
  std::shared_ptr<const StateCheckpoint> checkpoint;  // hybrid: the state at the end of the block
  std::map<std::vector<int32_t>, std::unique_ptr<Node>> children;
};

PrefixCache::PrefixCache(std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache,
                         size_t max_bytes)
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

Session PrefixCache::acquire(const std::string& partition, std::span<const int32_t> tokens,
                             int* reused, bool prefill_rest) {
  const int bs = cache_->block_size();
  const bool hybrid = model_->config().is_hybrid();
  std::vector<int32_t> blocks;
  std::shared_ptr<const StateCheckpoint> cp;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.lookups;
    const size_t max_blocks = tokens.empty() ? 0 : (tokens.size() - 1) / size_t(bs);
    auto it = roots_.find(partition);
    Node* node = it == roots_.end() ? nullptr : it->second.get();
    std::vector<Node*> path;
    for (size_t i = 0; node && i < max_blocks; ++i) {
      std::vector<int32_t> key(tokens.begin() + long(i) * bs, tokens.begin() + long(i + 1) * bs);
      auto c = node->children.find(key);
      if (c == node->children.end()) break;
      node = c->second.get();
      path.push_back(node);
    }
    // Hybrids restart from the deepest checkpoint on the match; blocks past it are recomputed.
    if (hybrid) {
      while (!path.empty() && !path.back()->checkpoint) path.pop_back();
      if (!path.empty()) cp = path.back()->checkpoint;
    }
    const uint64_t now = ++clock_;
    for (Node* n : path) {
      n->last_used = now;
      cache_->retain(n->block);  // the session's reference
      blocks.push_back(n->block);
    }
    const int n_reused = int(blocks.size()) * bs;
    stats_.tokens_reused += n_reused;
    stats_.tokens_computed += int64_t(tokens.size()) - n_reused;
    if (n_reused > 0) ++stats_.hits;
  }
  const size_t n_reused = blocks.size() * size_t(bs);
  if (reused) *reused = int(n_reused);
  std::vector<int32_t> head(tokens.begin(), tokens.begin() + long(n_reused));
  Session s = cp ? Session::from_checkpoint(model_, cache_, std::move(head), std::move(blocks), cp)
                 : Session::from_blocks(model_, cache_, std::move(head), std::move(blocks));
  if (prefill_rest || hybrid) s.append(tokens.subspan(n_reused));
  // A hybrid session keeps a bounded list of checkpoints and a long reply can push the prompt's
  // cold ones out: offer them now, while the session still holds them.
  if (hybrid) {
    std::lock_guard<std::mutex> lock(mu_);
    insert_locked(partition, s);
  }
  return s;
}

void PrefixCache::insert(const std::string& partition, const Session& session) {
  check(&session.cache() == cache_.get(), "PrefixCache::insert: session uses another KV cache");
  std::lock_guard<std::mutex> lock(mu_);
  insert_locked(partition, session);
}

void PrefixCache::insert_locked(const std::string& partition, const Session& session) {
  const int bs = cache_->block_size();
  const auto& tokens = session.tokens();
  size_t full = tokens.size() / size_t(bs);
  // Hybrid: the cold checkpoints by the block they end, and no blocks past the deepest one.
  std::map<size_t, std::shared_ptr<const StateCheckpoint>> cps;
  if (model_->config().is_hybrid()) {
    for (const auto& cp : session.checkpoints())
      if (cp->cold && cp->pos > 0 && cp->pos % bs == 0 && size_t(cp->pos / bs) <= full)
        cps[size_t(cp->pos / bs)] = cp;
    full = cps.empty() ? 0 : cps.rbegin()->first;
    if (full == 0) return;
  }
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
      child->depth = node->depth + 1;
      child->block = session.blocks()[i];
      cache_->retain(child->block);
      ++stats_.blocks;
    }
    child->last_used = now;
    node = child.get();
    auto cp = cps.find(i + 1);
    if (cp != cps.end() && !node->checkpoint) {
      node->checkpoint = cp->second;
      ++stats_.checkpoints;
      stats_.checkpoint_bytes += cp->second->bytes();
    }
  }
  evict_to_budget();
}

void PrefixCache::remove_leaf(Node* leaf) {
  cache_->release(leaf->block);
  --stats_.blocks;
  ++stats_.blocks_evicted;
  Node* parent = leaf->parent;
  for (auto it = parent->children.begin(); it != parent->children.end(); ++it)
    if (it->second.get() == leaf) {
      parent->children.erase(it);
      break;
    }
}

// Dense: the least recently used leaf that no session holds goes first. Hybrid: a leaf without a
// checkpoint cannot be restarted from, so those go first (whole chains of them); then the least
// recently used checkpoint (of equal age, the shallower: the deeper one saves more prefill).
void PrefixCache::evict_to_budget() {
  const bool hybrid = model_->config().is_hybrid();
  const size_t block_bytes = cache_->block_bytes();
  while (stats_.blocks * block_bytes + stats_.checkpoint_bytes > max_bytes_) {
    Node* leaf = nullptr;    // LRU removable leaf (hybrid: only checkpoint-less ones)
    Node* holder = nullptr;  // hybrid: LRU checkpoint
    std::vector<Node*> stack;
    for (auto& [_, root] : roots_) stack.push_back(root.get());
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (auto& [_, c] : n->children) stack.push_back(c.get());
      if (n->block < 0) continue;
      if (n->checkpoint && (!holder || n->last_used < holder->last_used ||
                            (n->last_used == holder->last_used && n->depth < holder->depth)))
        holder = n;
      if (n->children.empty() && cache_->refcount(n->block) == 1 && !(hybrid && n->checkpoint) &&
          (!leaf || n->last_used < leaf->last_used))
        leaf = n;
    }
    if (leaf) {
      remove_leaf(leaf);
    } else if (holder) {
      stats_.checkpoint_bytes -= holder->checkpoint->bytes();
      --stats_.checkpoints;
      ++stats_.checkpoints_evicted;
      holder->checkpoint.reset();
    } else {
      return;  // everything left is in use
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
  s.bytes = s.blocks * cache_->block_bytes() + s.checkpoint_bytes;
  return s;
}

}  // namespace fak
