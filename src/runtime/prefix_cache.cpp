#include "runtime/prefix_cache.h"

#include <algorithm>
#include <queue>
#include <utility>

#include "core/error.h"

namespace fak {

namespace {

constexpr int kMaxUses = 4;  // see the eviction policy in prefix_cache.h

// P0: the position at which a token's attention (4 FLOPs per query dim per position, QK and AV, in
// every attention layer) costs as much as its matmuls (2 per weight: every layer's projections and
// MLP, and the lm_head). DeltaNet layers are counted as attention-sized projections: close enough
// to rank blocks.
double attention_crossover(const ModelConfig& c, int n_attention_layers) {
  const double d = c.dim, q = c.q_dim(), kv = c.kv_dim();
  const double per_layer = d * q * 2 + d * kv * 2 + 3 * d * c.hidden_dim;
  const double weights = per_layer * c.n_layers + d * c.vocab;
  const double attention = 2.0 * std::max(1, n_attention_layers) * std::max(1.0, q);
  return std::max(1.0, weights / attention);
}

}  // namespace

// One node per cached block: the edge from its parent is the block's block_size token ids.
struct PrefixCache::Node {
  Node* parent = nullptr;
  int32_t block = -1;  // -1 at the root
  int depth = 0;       // blocks from the root: the node's block ends at position depth * block_size
  uint64_t last_used = 0;
  int uses = 0;         // requests that started from the block (at most kMaxUses)
  double priority = 0;  // GreedyDual: L + uses x cost when last used
  bool queued = false;  // in the eviction heap
  std::shared_ptr<const StateCheckpoint> checkpoint;  // hybrid: the state at the end of the block
  std::map<std::vector<int32_t>, std::unique_ptr<Node>> children;
};

PrefixCache::PrefixCache(std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache,
                         size_t max_bytes)
    : model_(std::move(model)), cache_(std::move(cache)), max_bytes_(max_bytes) {
  stats_.max_bytes = max_bytes;
  crossover_ = attention_crossover(model_->config(), model_->n_attention_layers());
  cache_->set_reclaimer(this, [this](size_t n) { return reclaim(n); });
}

PrefixCache::~PrefixCache() {
  cache_->clear_reclaimer(this);
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
      touch(n, now, /*hit=*/true);
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
      touch(child.get(), now, /*hit=*/true);  // its first use
    } else {
      touch(child.get(), now, /*hit=*/false);  // the acquire that matched it counted the use
    }
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

size_t PrefixCache::cached_blocks(const std::string& partition,
                                  std::span<const int32_t> tokens) const {
  const int bs = cache_->block_size();
  std::lock_guard<std::mutex> lock(mu_);
  const size_t max_blocks = tokens.empty() ? 0 : (tokens.size() - 1) / size_t(bs);
  auto it = roots_.find(partition);
  const Node* node = it == roots_.end() ? nullptr : it->second.get();
  size_t n = 0, usable = 0;
  for (; node && n < max_blocks; ++n) {
    std::vector<int32_t> key(tokens.begin() + long(n) * bs, tokens.begin() + long(n + 1) * bs);
    auto c = node->children.find(key);
    if (c == node->children.end()) break;
    node = c->second.get();
    if (!model_->config().is_hybrid() || node->checkpoint) usable = n + 1;
  }
  return usable;
}

size_t PrefixCache::adopt(const std::string& partition, std::span<const int32_t> tokens,
                          std::vector<int32_t> blocks,
                          std::vector<std::shared_ptr<const StateCheckpoint>> cps) {
  const int bs = cache_->block_size();
  check(tokens.size() % size_t(bs) == 0 && blocks.size() <= tokens.size() / size_t(bs) &&
            cps.size() == blocks.size(),
        "PrefixCache::adopt: tokens must be whole blocks, ending with the adopted ones");
  std::lock_guard<std::mutex> lock(mu_);
  const size_t head = tokens.size() / size_t(bs) - blocks.size();
  auto& root = roots_[partition];
  if (!root) root = std::make_unique<Node>();
  Node* node = root.get();
  auto key_of = [&](size_t i) {
    return std::vector<int32_t>(tokens.begin() + long(i) * bs, tokens.begin() + long(i + 1) * bs);
  };
  for (size_t i = 0; i < head && node; ++i) {
    auto c = node->children.find(key_of(i));
    node = c == node->children.end() ? nullptr : c->second.get();
  }
  if (!node) {
    for (int32_t b : blocks) cache_->release(b);
    if (root->children.empty()) roots_.erase(partition);
    return 0;
  }
  const uint64_t now = ++clock_;
  for (size_t j = 0; j < blocks.size(); ++j) {
    auto& child = node->children[key_of(head + j)];
    if (child) {
      cache_->release(blocks[j]);  // cached meanwhile: keep the one that may be in use
      touch(child.get(), now, /*hit=*/false);
    } else {
      child = std::make_unique<Node>();
      child->parent = node;
      child->depth = node->depth + 1;
      child->block = blocks[j];
      ++stats_.blocks;
      touch(child.get(), now, /*hit=*/true);
    }
    node = child.get();
    if (cps[j] && !node->checkpoint) {
      node->checkpoint = std::move(cps[j]);
      ++stats_.checkpoints;
      stats_.checkpoint_bytes += node->checkpoint->bytes();
    }
  }
  evict_to_budget();
  return blocks.size();
}

double PrefixCache::cost(int depth) const {
  // Mean position of the block's tokens, over the crossover (see prefix_cache.h).
  return 1.0 + (double(depth) - 0.5) * double(cache_->block_size()) / crossover_;
}

void PrefixCache::touch(Node* node, uint64_t now, bool hit) {
  if (hit) node->uses = std::min(node->uses + 1, kMaxUses);
  node->last_used = now;
  node->priority = inflation_ + double(node->uses) * cost(node->depth);
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

void PrefixCache::drop_checkpoint(Node* node) {
  stats_.checkpoint_bytes -= node->checkpoint->bytes();
  --stats_.checkpoints;
  ++stats_.checkpoints_evicted;
  node->checkpoint.reset();
}

size_t PrefixCache::evict(const std::function<bool(size_t freed)>& done, bool blocks_only) {
  const bool hybrid = model_->config().is_hybrid();
  // An unreferenced leaf frees its block; with blocks_only false a hybrid checkpoint can also go
  // alone (it is bytes of the cache's own cap, not a KV block).
  auto removable = [&](const Node* n) {
    return n->children.empty() && cache_->refcount(n->block) == 1;
  };
  struct Candidate {
    int rank;  // 0: a hybrid leaf without a checkpoint (useless: nothing restarts from it)
    double priority;
    uint64_t last_used;
    int depth;
    Node* node;
    bool operator>(const Candidate& o) const {
      if (rank != o.rank) return rank > o.rank;
      if (priority != o.priority) return priority > o.priority;
      if (last_used != o.last_used) return last_used > o.last_used;
      return depth > o.depth;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push = [&](Node* n) {
    if (n->queued || n->block < 0) return;
    const bool leaf = removable(n);
    if (!leaf && !(hybrid && n->checkpoint && !blocks_only)) return;
    n->queued = true;
    heap.push({leaf && hybrid && !n->checkpoint ? 0 : 1, n->priority, n->last_used, n->depth, n});
  };
  std::vector<Node*> stack;
  for (auto& [_, root] : roots_) stack.push_back(root.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& [_, c] : n->children) stack.push_back(c.get());
    push(n);
  }
  size_t freed = 0;
  while (!heap.empty() && !done(freed)) {
    const Candidate c = heap.top();
    heap.pop();
    Node* n = c.node;
    n->queued = false;
    if (c.rank == 1) inflation_ = std::max(inflation_, c.priority);
    if (removable(n)) {
      if (n->checkpoint) drop_checkpoint(n);
      Node* parent = n->parent;
      remove_leaf(n);  // n is gone
      ++freed;
      push(parent);  // it may be a leaf now
    } else if (n->checkpoint) {
      drop_checkpoint(n);
    }
  }
  while (!heap.empty()) {
    heap.top().node->queued = false;
    heap.pop();
  }
  return freed;
}

void PrefixCache::evict_to_budget() {
  if (max_bytes_ == 0) return;
  const size_t block_bytes = cache_->block_bytes();
  evict([&](size_t) { return stats_.blocks * block_bytes + stats_.checkpoint_bytes <= max_bytes_; },
        /*blocks_only=*/false);
}

size_t PrefixCache::reclaim(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t freed = evict([n](size_t freed) { return freed >= n; }, /*blocks_only=*/true);
  stats_.blocks_reclaimed += int64_t(freed);
  return freed;
}

void PrefixCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  evict([](size_t) { return false; }, /*blocks_only=*/false);
}

std::map<std::string, std::vector<PrefixCacheEntry>> PrefixCache::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::vector<PrefixCacheEntry>> out;
  for (const auto& [partition, root] : roots_) {
    std::vector<PrefixCacheEntry>& list = out[partition];
    std::vector<std::pair<const Node*, int>> stack;  // node, its parent's index
    for (const auto& [_, c] : root->children) stack.emplace_back(c.get(), -1);
    while (!stack.empty()) {
      const auto [n, parent] = stack.back();
      stack.pop_back();
      const auto& key =
          std::find_if(n->parent->children.begin(), n->parent->children.end(), [n](const auto& kv) {
            return kv.second.get() == n;
          })->first;
      cache_->retain(n->block);
      list.push_back(
          {parent, key, n->block, n->uses, n->priority - inflation_, n->last_used, n->checkpoint});
      const int index = int(list.size()) - 1;
      for (const auto& [_, c] : n->children) stack.emplace_back(c.get(), index);
    }
    if (list.empty()) out.erase(partition);
  }
  return out;
}

void PrefixCache::restore(const std::string& partition, std::vector<PrefixCacheEntry>& entries) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& root = roots_[partition];
  if (!root) root = std::make_unique<Node>();
  std::vector<Node*> nodes(entries.size(), nullptr);
  // The entries' recency order, after everything this cache has seen so far.
  const uint64_t base = clock_;
  for (size_t i = 0; i < entries.size(); ++i) {
    PrefixCacheEntry& e = entries[i];
    const int32_t block = std::exchange(e.block, -1);
    Node* parent = e.parent < 0           ? root.get()
                   : size_t(e.parent) < i ? nodes[size_t(e.parent)]
                                          : nullptr;
    if (!parent || int(e.tokens.size()) != cache_->block_size()) {
      cache_->release(block);
      continue;
    }
    auto& child = parent->children[e.tokens];
    if (child) {
      cache_->release(block);  // cached already: keep the one in use
    } else {
      child = std::make_unique<Node>();
      child->parent = parent;
      child->depth = parent->depth + 1;
      child->block = block;
      child->uses = std::clamp(e.uses, 1, kMaxUses);
      child->priority = inflation_ + e.priority;
      child->last_used = base + std::min<uint64_t>(e.last_used, UINT32_MAX);
      clock_ = std::max(clock_, child->last_used);
      ++stats_.blocks;
    }
    nodes[i] = child.get();
    if (e.checkpoint && !child->checkpoint) {
      child->checkpoint = e.checkpoint;
      ++stats_.checkpoints;
      stats_.checkpoint_bytes += e.checkpoint->bytes();
    }
  }
  if (root->children.empty()) roots_.erase(partition);
  evict_to_budget();
}

PrefixCacheStats PrefixCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PrefixCacheStats s = stats_;
  s.bytes = s.blocks * cache_->block_bytes() + s.checkpoint_bytes;
  return s;
}

}  // namespace fak
