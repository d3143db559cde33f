#include "backend/device.h"

#include <charconv>

#include "core/error.h"

namespace fak {

std::string Device::name() const {
  return kind == DeviceKind::Cpu ? "cpu" : "cuda:" + std::to_string(index);
}

Device parse_device(const std::string& text) {
  if (text == "cpu") return {};
  if (text == "cuda") return {DeviceKind::Cuda, 0};
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5) {
    int index = -1;
    const char* first = text.data() + 5;
    const char* last = text.data() + text.size();
    auto [end, ec] = std::from_chars(first, last, index);
    if (ec == std::errc() && end == last && index >= 0 && index < 1024)
      return {DeviceKind::Cuda, index};
  }
  fail("device '" + text + "' is not one of cpu, cuda, cuda:N");
}

bool cuda_compiled() {
#ifdef FAK_HAS_CUDA
  return true;
#else
  return false;
#endif
}

std::string device_unavailable_reason(const Device& device) {
  if (device.kind == DeviceKind::Cpu) return "";
#ifdef FAK_HAS_CUDA
  return cuda_device_problem(device.index);
#else
  return "this fak was built without CUDA (configure with -DFAK_CUDA=ON on a machine with nvcc)";
#endif
}

}  // namespace fak
