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
  // Written out, not defaulted: nvcc compiles the CUDA files that include this as C++17.
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

// "cpu", "cuda" (= cuda:0) or "cuda:N"; throws fak::Error naming the accepted forms.
Device parse_device(const std::string& text);

// Whether this binary has the CUDA backend compiled in.
bool cuda_compiled();

// Empty when `device` can run a forward pass here; otherwise one sentence saying why not ("this fak
// was built without CUDA ...", "no CUDA device: ..."), for errors and for tests that skip.
std::string device_unavailable_reason(const Device& device);

// What the CUDA backend says of device `index` (empty: usable; else why not: no driver, no
// device, too old a GPU). Defined by cuda/cuda_device.cpp in builds with CUDA, and asked only
// there; declared here so the backend layer never includes the CUDA folder above it.
std::string cuda_device_problem(int index);

}  // namespace fak
