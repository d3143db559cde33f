#include "io/checked_file.h"

#include <cstring>

#include "core/error.h"
#include "core/hash.h"

namespace fak {

CheckedFileView open_checked_file(std::string_view b, const char (&magic)[8], uint32_t version,
                                  const std::string& label, const char* kind) {
  if (b.size() < 16 || std::memcmp(b.data(), magic, 8) != 0)
    fail(label + " is not a fak " + kind + " file");
  uint32_t got_version, header_len;
  std::memcpy(&got_version, b.data() + 8, 4);
  std::memcpy(&header_len, b.data() + 12, 4);
  if (got_version != version)
    fail(label + " has format version " + std::to_string(got_version) +
         "; this fak reads version " + std::to_string(version));
  if (b.size() < 16 + size_t(header_len) + 8) fail(label + " is truncated");
  Fnv1a sum;
  sum.update(b.data(), b.size() - 8);
  uint64_t stored;
  std::memcpy(&stored, b.data() + b.size() - 8, 8);
  if (stored != sum.digest()) fail(label + " is corrupted or truncated (checksum mismatch)");
  return {b.substr(16, header_len), b.substr(16 + size_t(header_len), b.size() - 24 - header_len)};
}

}  // namespace fak
