// make_cuda_backend where this build has no CUDA backend (cuda/cuda_backend.cpp defines it where
// it does): the reason, as device selection gives it.
#include "backend/backend.h"
#include "backend/device.h"
#include "core/error.h"

namespace fak {

#ifndef FAK_HAS_CUDA
std::unique_ptr<Backend> make_cuda_backend(int index) {
  fail(device_unavailable_reason(Device{DeviceKind::Cuda, index}));
}
#endif

}  // namespace fak
