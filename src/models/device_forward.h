// The seam between a Model and a device that runs its forward pass. The CPU forward is Model's own
// (models/forward.cpp); a device forward holds its copy of the weights in device memory and runs
// the same batch of (block table, tokens) items over a KvCache whose slabs live on the device
// (kv_storage()), so sessions, the prefix cache, clone, evict, save and load work unchanged above.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "models/model.h"

namespace fak {

class KvStorage;

class DeviceForward {
 public:
  virtual ~DeviceForward() = default;
  virtual std::string device_name() const = 0;
  // Where caches for this model must keep their slabs.
  virtual std::shared_ptr<KvStorage> kv_storage() const = 0;
  // Allocates the forward's working memory for batches of up to `tokens` tokens and `logit_rows`
  // rows of logits now, so a memory budget planned after it (the server's KV) leaves it room.
  virtual void reserve_scratch(int tokens, int logit_rows) const = 0;
  // Bytes of device memory the weights take.
  virtual size_t weight_bytes() const = 0;
  virtual void forward(std::span<const BatchItem> batch, KvCache& cache,
                       const HiddenHook* hook) const = 0;
};

// The CUDA forward of `model` on GPU `index` (cuda/forward_cuda.cpp). Throws fak::Error naming
// what the device path does not run (hybrid layers, ...) or why the device cannot be used; a
// build without CUDA throws saying so.
std::unique_ptr<DeviceForward> make_cuda_forward(const Model& model, int index);

}  // namespace fak
