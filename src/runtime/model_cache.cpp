#include "runtime/model_cache.h"

#include "memory/kv_storage.h"

namespace fak {

std::vector<int> kv_layer_windows(const Model& model) {
  const ModelConfig& c = model.config();
  if (!c.has_windows() || c.is_hybrid()) return {};
  std::vector<int> windows(size_t(model.n_attention_layers()), 0);
  for (int layer = 0; layer < c.n_layers; ++layer)
    if (const int al = model.attention_index(layer); al >= 0) windows[size_t(al)] = c.window(layer);
  return windows;
}

std::shared_ptr<KvCache> make_kv_cache(const Model& model, KvCacheOptions options) {
  if (!options.storage) options.storage = model.make_kv_storage();
  if (options.layer_window.empty() && !options.keep_window_rows)
    options.layer_window = kv_layer_windows(model);
  return std::make_shared<KvCache>(model.n_attention_layers(), model.config().n_kv_heads,
                                   model.config().head_dim, std::move(options));
}

}  // namespace fak
