#include "runtime/model_cache.h"

#include "memory/kv_storage.h"

namespace fak {

std::shared_ptr<KvCache> make_kv_cache(const Model& model, KvCacheOptions options) {
  if (!options.storage) options.storage = model.make_kv_storage();
  return std::make_shared<KvCache>(model.n_attention_layers(), model.config().n_kv_heads,
                                   model.config().head_dim, std::move(options));
}

}  // namespace fak
