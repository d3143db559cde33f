#include "io/keyed_digest.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "core/error.h"

namespace fak {

struct KeyedDigest::Impl {
  EVP_MAC* mac = nullptr;
  EVP_MAC_CTX* ctx = nullptr;
  ~Impl() {
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
  }
};

KeyedDigest::KeyedDigest(std::string_view key) : impl_(std::make_unique<Impl>()) {
  impl_->mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (impl_->mac) impl_->ctx = EVP_MAC_CTX_new(impl_->mac);
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  if (!impl_->ctx || EVP_MAC_init(impl_->ctx, reinterpret_cast<const unsigned char*>(key.data()),
                                  key.size(), params) != 1)
    fail("HMAC-SHA-256 is not available (OpenSSL)");
}

KeyedDigest::~KeyedDigest() = default;

void KeyedDigest::update(const void* data, size_t n) {
  EVP_MAC_update(impl_->ctx, static_cast<const unsigned char*>(data), n);
}

std::string KeyedDigest::finish() {
  std::string out(kBytes, '\0');
  size_t len = 0;
  EVP_MAC_final(impl_->ctx, reinterpret_cast<unsigned char*>(out.data()), &len, out.size());
  out.resize(len);
  return out;
}

bool same_digest(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace fak
