// Tenant names for what the server keeps: hashes of API keys, so that no key is ever written to
// disk (session folders, prefix-cache files) or held in the prefix cache's partitions in clear.
#include <openssl/evp.h>

#include <stdexcept>

#include "core/error.h"
#include "server/context.h"

namespace fak::server {

namespace {

// The first 16 bytes of SHA-256, in hex: enough to never collide among a server's keys.
std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("SHA-256 is unavailable");
  static const char* kDigits = "0123456789abcdef";
  std::string hex;
  for (unsigned i = 0; i < 16 && i < len; ++i) {
    hex += kDigits[digest[i] >> 4];
    hex += kDigits[digest[i] & 15];
  }
  return hex;
}

}  // namespace

std::set<std::string> parse_api_keys(std::string_view value, const std::string& variable) {
  std::set<std::string> keys;
  const char* ws = " \t\r\n";
  size_t pos = 0;
  while (pos <= value.size()) {
    size_t comma = value.find(',', pos);
    if (comma == std::string_view::npos) comma = value.size();
    std::string_view key = value.substr(pos, comma - pos);
    const size_t b = key.find_first_not_of(ws);
    if (b != std::string_view::npos) keys.emplace(key.substr(b, key.find_last_not_of(ws) - b + 1));
    pos = comma + 1;
  }
  if (keys.empty())
    fail("--api-key-env " + variable +
         ": the variable holds no API key (only commas or whitespace); refusing to start a server "
         "without authentication. Set it to one or more comma-separated keys");
  return keys;
}

std::string tenant_hash(std::string_view key) {
  return sha256_hex(key);
}

std::string cache_partition(std::string_view tenant, std::string_view salt) {
  std::string both(tenant);
  both += '\x1f';
  both += salt;
  return tenant_hash(tenant) + "-" + sha256_hex(both);
}

}  // namespace fak::server
