#include "cuda/cuda_device.h"

#include "core/error.h"
#include "cuda/kernels.h"
#include "memory/kv_cache.h"

namespace fak {

void cuda_check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // or the next launch check would report this error again
  fail(std::string("CUDA: ") + what + ": " + cudaGetErrorString(status));
}

std::string cuda_device_problem(int index) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so a later query starts clean
    return std::string("no CUDA device: ") + cudaGetErrorString(status);
  }
  if (count == 0) return "no CUDA device: the driver reports none";
  if (index >= count)
    return "no CUDA device " + std::to_string(index) + " (this machine has " +
           std::to_string(count) + ")";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    cudaGetLastError();
    return "CUDA device " + std::to_string(index) + " cannot be queried";
  }
  // bf16 arithmetic and the warp shuffles the kernels use need compute capability 8.0 (Ampere).
  if (prop.major < 8)
    return std::string("CUDA device ") + prop.name + " has compute capability " +
           std::to_string(prop.major) + "." + std::to_string(prop.minor) + "; fak needs 8.0";
  if (cudaSetDevice(index) != cudaSuccess) {
    cudaGetLastError();
    return "CUDA device " + std::to_string(index) + " cannot be selected";
  }
  return cuda::kernel_image_problem();
}

void cuda_use_device(int index) {
  cuda_check(cudaSetDevice(index), "cudaSetDevice");
}

DeviceBuffer::DeviceBuffer(size_t bytes, const char* what) {
  reserve(bytes, what);
}

void cuda_free_on(int device, void* p) noexcept {
  if (!p) return;
  int current = -1;
  const bool switched = cudaGetDevice(&current) == cudaSuccess && current != device &&
                        cudaSetDevice(device) == cudaSuccess;
  cudaFree(p);
  if (switched) cudaSetDevice(current);
  cudaGetLastError();  // a failed free at exit must not be reported by the next call
}

void DeviceBuffer::release() noexcept {
  cuda_free_on(device_, data_);
  data_ = nullptr;
  bytes_ = 0;
}

DeviceBuffer::~DeviceBuffer() {
  release();
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = o.data_;
    bytes_ = o.bytes_;
    device_ = o.device_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::reserve(size_t bytes, const char* what) {
  if (bytes <= bytes_) return;
  release();
  cuda_check(cudaGetDevice(&device_), "cudaGetDevice");
  const cudaError_t status = cudaMalloc(&data_, bytes);
  if (status != cudaSuccess) {
    data_ = nullptr;
    cudaGetLastError();
    fail(std::string("CUDA: cannot allocate ") + std::to_string(bytes >> 20) + " MiB for " + what +
         ": " + cudaGetErrorString(status));
  }
  bytes_ = bytes;
}

void DeviceBuffer::upload(const void* host, size_t bytes) {
  if (bytes == 0) return;
  check(bytes <= bytes_, "DeviceBuffer: upload past the end");
  cuda_check(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
}

void DeviceBuffer::download(void* host, size_t bytes) const {
  if (bytes == 0) return;
  check(bytes <= bytes_, "DeviceBuffer: download past the end");
  cuda_check(cudaMemcpy(host, data_, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

namespace {

class CudaKvStorage final : public KvStorage {
 public:
  explicit CudaKvStorage(int index) : index_(index) {}
  std::string name() const override { return "cuda:" + std::to_string(index_); }
  bool host_accessible() const override { return false; }

  size_t available_bytes() const override {
    cuda_use_device(index_);
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return free;
  }

  uint8_t* map_slab(size_t bytes, const char* what) override {
    cuda_use_device(index_);
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, bytes);
    if (status != cudaSuccess) {
      cudaGetLastError();
      throw KvBudgetError(std::string("CUDA: cannot allocate ") + std::to_string(bytes >> 20) +
                          " MiB of device memory for the " + what + ": " +
                          cudaGetErrorString(status));
    }
    if (cudaMemset(p, 0, bytes) != cudaSuccess) {
      cudaGetLastError();
      cudaFree(p);
      fail(std::string("CUDA: cannot clear the ") + what);
    }
    return static_cast<uint8_t*>(p);
  }

  void unmap_slab(uint8_t* slab, size_t) noexcept override { cuda_free_on(index_, slab); }

  void copy_2d(CopyKind kind, void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
               size_t width, size_t height) override {
    if (width == 0 || height == 0) return;
    const cudaMemcpyKind k = kind == CopyKind::Inside   ? cudaMemcpyDeviceToDevice
                             : kind == CopyKind::ToHost ? cudaMemcpyDeviceToHost
                                                        : cudaMemcpyHostToDevice;
    cuda_use_device(index_);
    cuda_check(cudaMemcpy2D(dst, dst_pitch, src, src_pitch, width, height, k), "cudaMemcpy2D (KV)");
  }

 private:
  int index_;
};

}  // namespace

std::shared_ptr<KvStorage> cuda_kv_storage(int index) {
  return std::make_shared<CudaKvStorage>(index);
}

}  // namespace fak
