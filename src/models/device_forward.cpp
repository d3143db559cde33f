#include "models/device_forward.h"

#include "backend/device.h"
#include "core/error.h"

namespace fak {

#ifndef FAK_HAS_CUDA
std::unique_ptr<DeviceForward> make_cuda_forward(const Model&, int index) {
  fail(device_unavailable_reason(Device{DeviceKind::Cuda, index}));
}
#endif

}  // namespace fak
