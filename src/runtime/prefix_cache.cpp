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

// How many of `key`'s tokens `tokens` starts with.
size_t common_prefix(const std::vector<int32_t>& key, std::span<const int32_t> tokens) {
  const size_t n = std::min(key.size(), tokens.size());
  size_t i = 0;
  while (i < n && key[i] == tokens[i]) ++i;
  return i;
}

}  // namespace

// One node per cached block: the edge from its parent is the block's tokens, block_size of them,
// or fewer for a tail (the partly filled last block of a sequence that ended there; never a
// parent).
struct PrefixCache::Node {
  Node* parent = nullptr;
  int32_t block = -1;  // -1 at the root
  int end = 0;         // the position after the node's last token
  int len = 0;         // its tokens (block_size, or fewer for a tail)
  uint64_t last_used = 0;
  int uses = 0;            // requests that started from the block (at most kMaxUses)
  double priority = 0;     // GreedyDual: L + uses x cost when last used
  double cp_priority = 0;  // the same for its checkpoint, per block of memory
  bool queued = false, cp_queued = false;             // in the eviction heap
  std::shared_ptr<const StateCheckpoint> checkpoint;  // hybrid: the state at `end`
  std::map<std::vector<int32_t>, std::unique_ptr<Node>> children;
};

PrefixCache::PrefixCache(std::shared_ptr<const Model> model, std::shared_ptr<KvCache> cache,
                         size_t max_bytes, int checkpoint_every)
    : model_(std::move(model)),
      cache_(std::move(cache)),
      max_bytes_(max_bytes),
      checkpoint_every_(std::max(1, checkpoint_every)) {
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
    n->checkpoint.reset();
    for (auto& [_, c] : n->children) stack.push_back(c.get());
  }
}

Session PrefixCache::acquire(const std::string& partition, std::span<const int32_t> tokens,
                             int* reused, bool prefill_rest, std::vector<int>* checkpoint_at) {
  const int bs = cache_->block_size();
  const bool hybrid = model_->config().is_hybrid();
  std::vector<int32_t> blocks;
  std::shared_ptr<const StateCheckpoint> cp;
  int pos = 0;
  int shared = 0;  // how many of the prompt's tokens the tree holds, checkpoint or not
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.lookups;
    // Dense: the last token is computed here (fresh logits); hybrid: a checkpoint brings them.
    const int limit = hybrid ? int(tokens.size()) : std::max(0, int(tokens.size()) - 1);
    auto it = roots_.find(partition);
    Node* root = it == roots_.end() ? nullptr : it->second.get();
    std::vector<Node*> path;  // whole blocks matched, root excluded
    for (Node* node = root; node && node->end + bs <= limit;) {
      const std::vector<int32_t> key(tokens.begin() + node->end, tokens.begin() + node->end + bs);
      auto c = node->children.find(key);
      if (c == node->children.end()) break;
      node = c->second.get();
      path.push_back(node);
    }
    Node* last = nullptr;  // where the reuse ends: a node of the path, or a tail / partial block
    Node* partial = nullptr;
    if (root) {
      // The deepest whole block, then the longest common prefix with one of its children.
      Node* deepest = path.empty() ? root : path.back();
      size_t best = 0;
      const auto rest = tokens.subspan(size_t(deepest->end), size_t(limit - deepest->end));
      for (auto& [key, child] : deepest->children)
        if (const size_t n = common_prefix(key, rest); n > best) {
          best = n;
          partial = child.get();
        }
      shared = deepest->end + int(best);
      if (!hybrid) {
        pos = shared;
        last = partial ? partial : deepest;
      }
    }
    if (root && hybrid) {
      // The deepest checkpoint: a tail of a path node that the prompt matches whole, or a node's.
      for (size_t d = path.size() + 1; d-- > 0 && !cp;) {
        Node* node = d == 0 ? root : path[d - 1];
        Node* tail = nullptr;
        for (auto& [key, child] : node->children) {
          if (!child->checkpoint || int(key.size()) >= bs || node->end + int(key.size()) > limit ||
              (tail && tail->len >= child->len))
            continue;
          if (common_prefix(key, tokens.subspan(size_t(node->end))) == key.size())
            tail = child.get();
        }
        Node* at = tail ? tail : node->checkpoint ? node : nullptr;
        if (!at) continue;
        path.resize(d);
        cp = at->checkpoint;
        pos = at->end;
        last = at;
      }
      if (!cp) path.clear();
    }
    const uint64_t now = ++clock_;
    if (last && last != root && (path.empty() || last != path.back())) path.push_back(last);
    if (!hybrid && pos > 0 && cache_->has_windows()) {
      // Sliding windows: the reuse ends where the windowed rows the next token reads are all kept
      // (a session may have dropped them behind it, memory/kv_cache.h).
      std::vector<int32_t> held;
      for (Node* n : path) held.push_back(n->block);
      pos = cache_->exact_point(held, pos);
      path.resize(size_t((pos + bs - 1) / bs));
    }
    for (Node* n : path) {
      touch(n, now, /*hit=*/true);
      cache_->retain(n->block);  // the session's reference
      blocks.push_back(n->block);
    }
    stats_.tokens_reused += pos;
    stats_.tokens_computed += int64_t(tokens.size()) - pos;
    if (pos > 0) ++stats_.hits;
    if (cp) ++stats_.checkpoint_hits;
  }
  if (reused) *reused = pos;
  // The cache's own checkpoints for this prompt: where it leaves the cached tokens, and along it.
  std::vector<int> wishes;
  if (hybrid) {
    const int n = int(tokens.size());
    for (int p = (pos / checkpoint_every_ + 1) * checkpoint_every_; p < n; p += checkpoint_every_)
      wishes.push_back(p);
    if (shared > pos && shared < n) wishes.push_back(shared);
    std::sort(wishes.begin(), wishes.end());
    wishes.erase(std::unique(wishes.begin(), wishes.end()), wishes.end());
  }
  if (checkpoint_at) *checkpoint_at = wishes;
  std::vector<int32_t> head(tokens.begin(), tokens.begin() + pos);
  Session s = cp ? Session::from_checkpoint(model_, cache_, std::move(head), std::move(blocks), cp)
                 : Session::from_blocks(model_, cache_, std::move(head), std::move(blocks));
  if (prefill_rest && pos < int(tokens.size())) {
    for (int w : wishes) {
      s.append(tokens.subspan(size_t(s.size()), size_t(w - s.size())));
      s.checkpoint();
    }
    s.append(tokens.subspan(size_t(s.size())));
    // Its checkpoints, offered while the session still holds them.
    if (hybrid) {
      std::lock_guard<std::mutex> lock(mu_);
      insert_locked(partition, s);
    }
  }
  return s;
}

void PrefixCache::insert(const std::string& partition, const Session& session) {
  check(&session.cache() == cache_.get(), "PrefixCache::insert: session uses another KV cache");
  std::lock_guard<std::mutex> lock(mu_);
  insert_locked(partition, session);
}

PrefixCache::Node* PrefixCache::add_child(Node* parent, std::vector<int32_t> key, int32_t block,
                                          uint64_t now) {
  const bool hybrid = model_->config().is_hybrid();
  const int bs = cache_->block_size();
  auto& child = parent->children[key];
  if (child) {
    touch(child.get(), now, /*hit=*/false);  // the acquire that matched it counted the use
    return child.get();
  }
  if (!hybrid) {
    // A dense hit may end inside any child, so an entry whose tokens begin another's adds nothing,
    // and one that begins the new entry's is subsumed by it.
    for (auto& [k, c] : parent->children)
      if (c && c.get() != child.get() && k.size() > key.size() &&
          std::equal(key.begin(), key.end(), k.begin())) {
        parent->children.erase(key);
        touch(c.get(), now, /*hit=*/false);
        return c.get();
      }
    for (auto it = parent->children.begin(); it != parent->children.end();) {
      Node* c = it->second.get();
      const bool subsumed = c && c != child.get() && it->first.size() < key.size() &&
                            c->children.empty() &&
                            std::equal(it->first.begin(), it->first.end(), key.begin());
      ++it;
      if (subsumed) remove_leaf(c, /*evicted=*/false);
    }
  }
  child = std::make_unique<Node>();
  child->parent = parent;
  child->len = int(key.size());
  child->end = parent->end + child->len;
  child->block = block;
  cache_->retain(block);
  ++stats_.blocks;
  touch(child.get(), now, /*hit=*/true);  // its first use
  (void)bs;
  return child.get();
}

void PrefixCache::insert_locked(const std::string& partition, const Session& session) {
  const int bs = cache_->block_size();
  const auto& tokens = session.tokens();
  const int n = int(tokens.size());
  // The positions reuse may end at: the session's end (dense), its checkpoints (hybrid).
  std::map<int, std::shared_ptr<const StateCheckpoint>> points;
  if (model_->config().is_hybrid()) {
    for (const auto& cp : session.checkpoints())
      if (cp->pos() > 0 && cp->pos() <= n) points[cp->pos()] = cp;
  } else if (n > 0) {
    points[n] = nullptr;
  }
  if (points.empty()) return;
  auto& root = roots_[partition];
  if (!root) root = std::make_unique<Node>();
  const uint64_t now = ++clock_;
  const int deepest = points.rbegin()->first;
  std::vector<Node*> path{root.get()};  // path[i]: the node ending at i * bs
  for (int i = 0; (i + 1) * bs <= deepest; ++i) {
    std::vector<int32_t> key(tokens.begin() + i * bs, tokens.begin() + (i + 1) * bs);
    path.push_back(add_child(path.back(), std::move(key), session.blocks()[size_t(i)], now));
  }
  for (const auto& [p, cp] : points) {
    Node* node = path[size_t(p / bs)];
    if (p % bs != 0) {
      std::vector<int32_t> key(tokens.begin() + (p - p % bs), tokens.begin() + p);
      node = add_child(node, std::move(key), session.blocks()[size_t(p / bs)], now);
    }
    if (cp && !node->checkpoint && node->end == p) {
      node->checkpoint = cp;
      node->cp_priority = checkpoint_priority(node);
      ++stats_.checkpoints;
      stats_.checkpoint_bytes += cp->bytes();
    }
  }
  evict_to_budget();
}

size_t PrefixCache::cached_blocks(const std::string& partition,
                                  std::span<const int32_t> tokens) const {
  const int bs = cache_->block_size();
  const bool hybrid = model_->config().is_hybrid();
  std::lock_guard<std::mutex> lock(mu_);
  // As acquire: dense reuse stops before the last token; a hybrid restarts at a checkpoint.
  const size_t limit = hybrid ? tokens.size() : (tokens.empty() ? 0 : tokens.size() - 1);
  auto it = roots_.find(partition);
  const Node* node = it == roots_.end() ? nullptr : it->second.get();
  size_t n = 0, usable = 0;
  for (; node && (n + 1) * size_t(bs) <= limit; ++n) {
    std::vector<int32_t> key(tokens.begin() + long(n) * bs, tokens.begin() + long(n + 1) * bs);
    auto c = node->children.find(key);
    if (c == node->children.end()) break;
    node = c->second.get();
    if (!hybrid || node->checkpoint) usable = n + 1;
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
  auto key_of = [&](size_t i) {
    return std::vector<int32_t>(tokens.begin() + long(i) * bs, tokens.begin() + long(i + 1) * bs);
  };
  auto& root = roots_[partition];
  if (!root) root = std::make_unique<Node>();
  Node* node = root.get();
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
    // add_child takes its own reference (or keeps the block cached meanwhile, which may be in
    // use): the one handed over goes back either way.
    node = add_child(node, key_of(head + j), blocks[j], now);
    cache_->release(blocks[j]);
    if (cps[j] && !node->checkpoint && node->end == cps[j]->pos()) {
      node->checkpoint = std::move(cps[j]);
      node->cp_priority = checkpoint_priority(node);
      ++stats_.checkpoints;
      stats_.checkpoint_bytes += node->checkpoint->bytes();
    }
  }
  evict_to_budget();
  return blocks.size();
}

double PrefixCache::cost(const Node* node) const {
  // Mean position of the block's tokens, over the crossover (see prefix_cache.h).
  return 1.0 + (double(node->end) - 0.5 * double(node->len)) / crossover_;
}

double PrefixCache::checkpoint_priority(const Node* node) const {
  // The previous restart point on the node's tokens: an ancestor's checkpoint, or one on a tail of
  // an ancestor whose tokens begin the path (the deepest wins, and deeper levels hold deeper ones).
  int from = 0;
  const Node* child = node;
  for (const Node* p = node->parent; p && from == 0; child = p, p = p->parent) {
    const std::vector<int32_t>* path_key = nullptr;
    for (const auto& [k, c] : p->children)
      if (c.get() == child) path_key = &k;
    for (const auto& [k, c] : p->children)
      if (c.get() != child && c->checkpoint && path_key && k.size() < path_key->size() &&
          std::equal(k.begin(), k.end(), path_key->begin()))
        from = std::max(from, c->end);
    if (p->checkpoint) from = std::max(from, p->end);
  }
  const double blocks = double(std::max<size_t>(1, node->checkpoint->n_blocks()));
  return inflation_ + double(node->uses) * cost(node) * double(node->end - from) /
                          (double(cache_->block_size()) * blocks);
}

void PrefixCache::touch(Node* node, uint64_t now, bool hit) {
  if (hit) node->uses = std::min(node->uses + 1, kMaxUses);
  node->last_used = now;
  node->priority = inflation_ + double(node->uses) * cost(node);
  if (node->checkpoint) node->cp_priority = checkpoint_priority(node);
}

void PrefixCache::remove_leaf(Node* leaf, bool evicted) {
  if (leaf->checkpoint) drop_checkpoint(leaf);
  cache_->release(leaf->block);
  --stats_.blocks;
  if (evicted) ++stats_.blocks_evicted;
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
  node->checkpoint.reset();  // its blocks go back unless a session still holds it
}

size_t PrefixCache::evict(const std::function<bool(size_t freed)>& done, bool blocks_only) {
  const bool hybrid = model_->config().is_hybrid();
  // Two kinds of candidate: an unreferenced leaf (frees its block), and a hybrid checkpoint alone
  // (frees its blocks when no session shares it; blocks_only: only then). A hybrid leaf keeps its
  // checkpoint until the checkpoint's own turn comes; then, useless, it goes next.
  auto removable = [&](const Node* n) {
    return n->children.empty() && cache_->refcount(n->block) == 1 && !n->checkpoint;
  };
  auto droppable = [&](const Node* n) {
    return n->checkpoint && (!blocks_only || n->checkpoint.use_count() == 1);
  };
  struct Candidate {
    int rank;  // 0: a hybrid leaf without a checkpoint (useless: nothing restarts from it)
    double priority;
    uint64_t last_used;
    int end;
    Node* node;
    bool checkpoint;  // drop the node's checkpoint, not the node
    bool operator>(const Candidate& o) const {
      if (rank != o.rank) return rank > o.rank;
      if (priority != o.priority) return priority > o.priority;
      if (last_used != o.last_used) return last_used > o.last_used;
      return end > o.end;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push = [&](Node* n) {
    if (n->block < 0) return;
    if (!n->queued && removable(n)) {
      n->queued = true;
      heap.push({hybrid ? 0 : 1, n->priority, n->last_used, n->end, n, false});
    }
    if (!n->cp_queued && droppable(n)) {
      n->cp_queued = true;
      heap.push({1, n->cp_priority, n->last_used, n->end, n, true});
    }
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
  const size_t in_use = cache_->blocks_in_use();
  while (!heap.empty() && !done(freed)) {
    const Candidate c = heap.top();
    heap.pop();
    Node* n = c.node;
    (c.checkpoint ? n->cp_queued : n->queued) = false;
    if (c.checkpoint ? !droppable(n) : !removable(n)) continue;  // changed since it was queued
    if (c.rank == 1) inflation_ = std::max(inflation_, c.priority);
    if (c.checkpoint) {
      drop_checkpoint(n);
      push(n);  // a leaf without its checkpoint: useless on a hybrid, next to go
    } else {
      Node* parent = n->parent;
      remove_leaf(n);  // n is gone
      push(parent);    // it may be a leaf now
    }
    freed = in_use - std::min(in_use, cache_->blocks_in_use());
  }
  while (!heap.empty()) {
    (heap.top().checkpoint ? heap.top().node->cp_queued : heap.top().node->queued) = false;
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
  const int bs = cache_->block_size();
  std::vector<Node*> nodes(entries.size(), nullptr);
  // The entries' recency order, after everything this cache has seen so far.
  const uint64_t base = clock_;
  for (size_t i = 0; i < entries.size(); ++i) {
    PrefixCacheEntry& e = entries[i];
    const int32_t block = std::exchange(e.block, -1);
    Node* parent = e.parent < 0           ? root.get()
                   : size_t(e.parent) < i ? nodes[size_t(e.parent)]
                                          : nullptr;
    // A tail is never a parent; an entry holds 1..block_size tokens.
    if (!parent || (parent != root.get() && parent->len != bs) || e.tokens.empty() ||
        int(e.tokens.size()) > bs) {
      cache_->release(block);
      continue;
    }
    auto& child = parent->children[e.tokens];
    if (child) {
      cache_->release(block);  // cached already: keep the one in use
    } else {
      child = std::make_unique<Node>();
      child->parent = parent;
      child->len = int(e.tokens.size());
      child->end = parent->end + child->len;
      child->block = block;
      child->uses = std::clamp(e.uses, 1, kMaxUses);
      child->priority = inflation_ + e.priority;
      child->last_used = base + std::min<uint64_t>(e.last_used, UINT32_MAX);
      clock_ = std::max(clock_, child->last_used);
      ++stats_.blocks;
    }
    nodes[i] = child.get();
    if (e.checkpoint && !child->checkpoint && e.checkpoint->pos() == child->end) {
      child->checkpoint = e.checkpoint;
      child->cp_priority = checkpoint_priority(child.get());
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
