// fak::ojson: JSON that keeps its keys in the order they were written (schemas compile properties
// in the order a client wrote them, replies follow OpenAI's key order, templates render tools as
// given) and still finds a key in constant time.
//
// note: nlohmann::ordered_json stores an object as a vector and looks every key up by scanning it,
// so parsing an object of n keys costs n^2 / 2 comparisons: 100k keys in an ignored request field
// took 8.7 s of a server's CPU (issue 23). IndexedOrderedMap is the same vector (so iteration
// order, the library's is_ordered_map handling and every caller stay as they were) with a hash
// index of positions beside it once an object grows past a few dozen keys.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fak {

template <class Key, class T, class IgnoredLess = std::less<Key>,
          class Allocator = std::allocator<std::pair<const Key, T>>>
struct IndexedOrderedMap : nlohmann::ordered_map<Key, T, IgnoredLess, Allocator> {
  using Base = nlohmann::ordered_map<Key, T, IgnoredLess, Allocator>;
  using Container = typename Base::Container;
  using key_type = Key;
  using mapped_type = T;
  using iterator = typename Base::iterator;
  using const_iterator = typename Base::const_iterator;
  using size_type = typename Base::size_type;
  using value_type = typename Base::value_type;
  using key_compare = typename Base::key_compare;

  // Objects this small are scanned: cheaper than hashing, and no index to keep.
  static constexpr size_type kScanned = 32;

  IndexedOrderedMap() = default;
  using Base::Base;
  // The index holds positions, which a copy keeps but a copy's vector does not share: rebuilt
  // lazily rather than copied.
  IndexedOrderedMap(const IndexedOrderedMap& other) : Base(other) {}
  IndexedOrderedMap(IndexedOrderedMap&& other) noexcept
      : Base(std::move(other)), slots_(std::move(other.slots_)), indexed_(other.indexed_) {
    other.drop_index();
  }
  IndexedOrderedMap& operator=(const IndexedOrderedMap& other) {
    if (this != &other) {
      Base::operator=(other);
      drop_index();
    }
    return *this;
  }
  IndexedOrderedMap& operator=(IndexedOrderedMap&& other) noexcept {
    if (this != &other) {
      Base::operator=(std::move(other));
      slots_ = std::move(other.slots_);
      indexed_ = other.indexed_;
      other.drop_index();
    }
    return *this;
  }

  template <class K>
  iterator find(const K& key) {
    return this->begin() + position(key);
  }
  template <class K>
  const_iterator find(const K& key) const {
    return this->begin() + position(key);
  }
  template <class K>
  size_type count(const K& key) const {
    return position(key) < this->size() ? 1 : 0;
  }
  template <class K>
  T& at(const K& key) {
    const size_type i = position(key);
    if (i == this->size()) throw std::out_of_range("key not found");
    return Container::operator[](i).second;
  }
  template <class K>
  const T& at(const K& key) const {
    const size_type i = position(key);
    if (i == this->size()) throw std::out_of_range("key not found");
    return Container::operator[](i).second;
  }

  template <class K>
  std::pair<iterator, bool> emplace(K&& key, T&& value) {
    const size_type i = position(key);
    if (i < this->size()) return {this->begin() + i, false};
    Container::emplace_back(std::forward<K>(key), std::forward<T>(value));
    return {std::prev(this->end()), true};
  }
  template <class K>
  T& operator[](K&& key) {
    return emplace(std::forward<K>(key), T{}).first->second;
  }
  template <class K>
  const T& operator[](const K& key) const {
    return at(key);
  }

  std::pair<iterator, bool> insert(value_type&& value) {
    return emplace(value.first, std::move(value.second));
  }
  std::pair<iterator, bool> insert(const value_type& value) {
    const size_type i = position(value.first);
    if (i < this->size()) return {this->begin() + i, false};
    Container::push_back(value);
    return {std::prev(this->end()), true};
  }
  template <class InputIt, class = typename std::enable_if<std::is_convertible<
                               typename std::iterator_traits<InputIt>::iterator_category,
                               std::input_iterator_tag>::value>::type>
  void insert(InputIt first, InputIt last) {
    for (auto it = first; it != last; ++it) insert(*it);
  }

  // Erasing moves the later entries down: their positions change, so the index goes (rebuilt at
  // the next lookup). Rare in request handling.
  template <class K, class = typename std::enable_if<
                         !std::is_same<typename std::decay<K>::type, iterator>::value &&
                         !std::is_same<typename std::decay<K>::type, const_iterator>::value>::type>
  size_type erase(K&& key) {
    const size_type i = position(key);
    if (i == this->size()) return 0;
    Base::erase(this->begin() + i);
    drop_index();
    return 1;
  }
  iterator erase(iterator pos) {
    drop_index();
    return Base::erase(pos);
  }
  iterator erase(iterator first, iterator last) {
    drop_index();
    return Base::erase(first, last);
  }
  void clear() noexcept {
    Container::clear();
    drop_index();
  }

 private:
  void drop_index() const noexcept {
    slots_.clear();
    indexed_ = 0;
  }

  static uint32_t hash_of(std::string_view s) noexcept {
    const size_t h = std::hash<std::string_view>{}(s);
    return uint32_t(h ^ (h >> 32));
  }

  // Open addressing over positions: a slot holds (position + 1) in its low half and the key's
  // hash in its high half, 0 when empty; at most half the slots are used. No allocation per key
  // (a map of strings would copy every key and allocate a node for it).
  void index_insert(size_type i, uint32_t h) const {
    const size_t mask = slots_.size() - 1;
    for (size_t s = h & mask;; s = (s + 1) & mask)
      if (slots_[s] == 0) {
        slots_[s] = (uint64_t(h) << 32) | uint64_t(i + 1);
        return;
      }
  }

  // Where key is (the first entry with it), or size() when it is absent.
  template <class K>
  size_type position(const K& key) const {
    const std::string_view k(key);
    const size_type n = this->size();
    if (n <= kScanned) {
      for (size_type i = 0; i < n; ++i)
        if (std::string_view(Container::operator[](i).first) == k) return i;
      return n;
    }
    // Entries appended since the last lookup join the index here (emplace_back above, or
    // anything else that grew the vector); an index that is ahead of the vector was stale.
    if (indexed_ > n) drop_index();
    if (slots_.size() < 2 * n) {
      size_t cap = 64;
      while (cap < 2 * n) cap *= 2;
      slots_.assign(cap, 0);
      indexed_ = 0;
    }
    for (; indexed_ < n; ++indexed_)
      index_insert(indexed_, hash_of(std::string_view(Container::operator[](indexed_).first)));
    const uint32_t h = hash_of(k);
    const size_t mask = slots_.size() - 1;
    for (size_t s = h & mask; slots_[s] != 0; s = (s + 1) & mask) {
      if (uint32_t(slots_[s] >> 32) != h) continue;
      const size_type i = size_type(uint32_t(slots_[s]) - 1);
      if (std::string_view(Container::operator[](i).first) == k) return i;
    }
    return n;
  }

  mutable std::vector<uint64_t> slots_;
  mutable size_type indexed_ = 0;
};

using ojson = nlohmann::basic_json<IndexedOrderedMap>;

// Deepest nesting of arrays and objects fak parses from outside (request bodies, tool calls a model
// wrote; tool schemas need a dozen): text nested thousands deep parses, but copying or walking it
// recursively overflows the stack.
inline constexpr int kMaxJsonDepth = 128;

// How deeply arrays and objects nest in JSON text, counted without parsing it.
inline int json_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = depth + 1 > deepest ? depth + 1 : deepest;
      ++depth;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace fak
