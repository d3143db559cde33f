// A KV cache shaped for a model and placed where its forward runs (host memory for the CPU, device
// memory for a GPU): what every command, the server and the tools make their cache with.
#pragma once

#include <memory>

#include "memory/kv_cache.h"
#include "models/model.h"

namespace fak {

// options.storage, when null, becomes model.make_kv_storage().
std::shared_ptr<KvCache> make_kv_cache(const Model& model, KvCacheOptions options = {});

}  // namespace fak
