// What the rest of fak may ask of the CUDA backend without the toolkit's headers
// (backend/device.cpp is compiled in every build). Defined in cuda/cuda_device.cpp.
#pragma once

#include <string>

namespace fak {

// Empty when device `index` can be used; else why not (no driver, no device, too old a GPU).
std::string cuda_device_problem(int index);

}  // namespace fak
