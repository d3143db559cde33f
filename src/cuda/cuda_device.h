// The CUDA runtime as fak uses it: one check for every call (a failure names the call and the
// driver's words), device memory that frees itself, and the KV storage that puts a KvCache's slabs
// in GPU memory. Compiled only with -DFAK_CUDA=ON.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

#include "backend/device.h"
#include "memory/kv_storage.h"

namespace fak {

// Throws fak::Error "CUDA: <what>: <driver message>" unless status is cudaSuccess.
void cuda_check(cudaError_t status, const char* what);

// Makes `index` the calling thread's current device (the runtime's device is per thread: a server
// worker or an OpenMP thread that has never set it would be on device 0).
void cuda_use_device(int index);

// A device allocation of `bytes` (contents undefined unless zeroed); moves, never copies.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t bytes, const char* what);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_), device_(o.device_) {
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }
  // Grows (contents lost) to at least `bytes`; a no-op when already as large.
  void reserve(size_t bytes, const char* what);
  void upload(const void* host, size_t bytes);    // host -> device, synchronous
  void download(void* host, size_t bytes) const;  // device -> host, synchronous

 private:
  void release() noexcept;  // frees on the device it was allocated on

  void* data_ = nullptr;
  size_t bytes_ = 0;
  int device_ = 0;
};

// Frees device memory on `device`, the calling thread's current device left as it was: a thread
// that never chose one (the runtime's default is device 0) must not free another GPU's memory
// from device 0's context.
void cuda_free_on(int device, void* p) noexcept;

// KV slabs in the memory of GPU `index`, zero-filled; copies with cudaMemcpy2D.
std::shared_ptr<KvStorage> cuda_kv_storage(int index);

}  // namespace fak
