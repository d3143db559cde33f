// HMAC-SHA-256 over a stream of bytes (OpenSSL): the MAC that files fak writes into a private
// folder carry under the folder's key (io/private_dir.h), so that a file written anywhere else, by
// anyone without the key, is refused even when its own checksum is right.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace fak {

class KeyedDigest {
 public:
  static constexpr size_t kBytes = 32;
  explicit KeyedDigest(std::string_view key);
  ~KeyedDigest();
  KeyedDigest(const KeyedDigest&) = delete;
  KeyedDigest& operator=(const KeyedDigest&) = delete;
  void update(const void* data, size_t n);
  std::string finish();  // kBytes bytes

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Constant-time comparison of two MACs.
bool same_digest(std::string_view a, std::string_view b);

}  // namespace fak
