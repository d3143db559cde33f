#include "store/store_keys.h"

#include <openssl/evp.h>

#include <memory>

#include "core/cpu_features.h"
#include "core/error.h"
#include "ops/attention_kernels.h"
#include "ops/matmul.h"

namespace fak::store {

namespace {

// The kernel family the forward runs with: KV rows are bit-identical only between servers that
// compute them with the same one.
std::string kernels(const Model& model) {
  if (model.device().kind != DeviceKind::Cpu) return model.device().name();
  const CpuFeatures& f = cpu_features();
  // bf16 activations (ops/matmul.h) compute other KV rows from bf16 weights than the f32 path;
  // attention on AMX-BF16 (f16 / bf16 KV, ops/attention_kernels.h) rounds otherwise than the
  // vector tiles, so later layers' rows differ from theirs.
  // The tile unit sums bf16 products otherwise than vdpbf16ps (ops/matmul.h).
  std::string act = bf16_activations() ? ".bf16act" : "";
  if (bf16_activations_on_tiles()) act += ".amx";
  if (kernels::amx_attention_enabled()) act += ".amxattn";
  if (f.avx512)
    return std::string("avx512") + (f.avx512_vnni ? "vnni" : "") + (f.avx512_bf16 ? "bf16" : "") +
           act;
  return f.avx2 ? "avx2" : "scalar";
}

struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxFree>;

}  // namespace

std::string store_namespace(const Model& model, const KvCache& cache) {
  return "fak:" + model.identity() + "." + kv_type_name(cache.dtype()) +
         (cache.keeps_kraw() ? "" : ".nokraw") + ".b" + std::to_string(cache.block_size()) + "." +
         kernels(model) + ":";
}

std::vector<std::string> block_keys(const std::string& ns, const std::string& partition,
                                    std::span<const int32_t> tokens, int block_size, size_t n) {
  check(n * size_t(block_size) <= tokens.size(), "block_keys: more blocks than tokens");
  MdCtx ctx(EVP_MD_CTX_new()), copy(EVP_MD_CTX_new());
  check(ctx && copy && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1,
        "SHA-256 is unavailable");
  // note: the partition's length first, so no partition and token bytes can run into another's.
  const uint64_t len = partition.size();
  EVP_DigestUpdate(ctx.get(), &len, sizeof(len));
  EVP_DigestUpdate(ctx.get(), partition.data(), partition.size());
  static const char* kDigits = "0123456789abcdef";
  std::vector<std::string> keys;
  keys.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    EVP_DigestUpdate(ctx.get(), tokens.data() + i * size_t(block_size),
                     size_t(block_size) * sizeof(int32_t));
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    EVP_MD_CTX_copy_ex(copy.get(), ctx.get());
    EVP_DigestFinal_ex(copy.get(), digest, &dlen);
    std::string key = ns + "b:";
    for (unsigned j = 0; j < dlen; ++j) {
      key += kDigits[digest[j] >> 4];
      key += kDigits[digest[j] & 15];
    }
    keys.push_back(std::move(key));
  }
  return keys;
}

}  // namespace fak::store
