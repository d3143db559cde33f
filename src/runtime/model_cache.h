// A KV cache shaped for a model and placed where its forward runs (host memory for the CPU, device
// memory for a GPU): what every command, the server and the tools make their cache with.
#pragma once

#include <memory>
#include <vector>

#include "memory/kv_cache.h"
#include "models/model.h"

namespace fak {

// Per attention layer, its sliding window (KvCacheOptions::layer_window): empty where windowed
// rows are not dropped (no windows, or a hybrid model, whose sessions replay from state
// checkpoints instead).
std::vector<int> kv_layer_windows(const Model& model);

// options.storage, when null, becomes model.make_kv_storage(); options.layer_window, when empty
// and not keep_window_rows, becomes kv_layer_windows(model).
std::shared_ptr<KvCache> make_kv_cache(const Model& model, KvCacheOptions options = {});

}  // namespace fak
