// 64-bit FNV-1a: for identities (model, session headers) and checksums of session files.
// Not cryptographic: it detects corruption and mix-ups, not tampering.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fak {

class Fnv1a {
 public:
  void update(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) {
      h_ ^= p[i];
      h_ *= 0x100000001b3ull;
    }
  }
  void update(std::string_view s) { update(s.data(), s.size()); }
  uint64_t digest() const { return h_; }
  std::string hex() const {
    static const char* kDigits = "0123456789abcdef";
    std::string s(16, '0');
    for (int i = 0; i < 16; ++i) s[size_t(i)] = kDigits[(h_ >> (60 - 4 * i)) & 0xf];
    return s;
  }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

}  // namespace fak
