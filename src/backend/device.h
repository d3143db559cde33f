// Which device runs a model's forward pass: the CPU (always there) or a CUDA GPU (only in a build
// configured with -DFAK_CUDA=ON, and only where the driver finds a device). Chosen once, at load
// (`--device cpu|cuda|cuda:N`); every layer above asks the model, never the hardware.
#pragma once

#include <string>

namespace fak {

enum class DeviceKind { Cpu, Cuda };

struct Device {
  DeviceKind kind = DeviceKind::Cpu;
  int index = 0;             // which GPU, for Cuda
  std::string name() const;  // "cpu", "cuda:0"
  bool operator==(const Device&) const = default;
};

// "cpu", "cuda" (= cuda:0) or "cuda:N"; throws fak::Error naming the accepted forms.
Device parse_device(const std::string& text);

// Whether this binary has the CUDA backend compiled in.
bool cuda_compiled();

// Empty when `device` can run a forward pass here; otherwise one sentence saying why not ("this fak
// was built without CUDA ...", "no CUDA device: ..."), for errors and for tests that skip.
std::string device_unavailable_reason(const Device& device);

}  // namespace fak
