#include "memory/recurrent_state.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace fak {

RecurrentState::RecurrentState(const RecurrentShape& shape) {
  conv_floats = shape.conv_floats;
  ssm_floats = shape.ssm_floats;
  int n = 0;
  slot.assign(shape.linear_layers.size(), -1);
  for (size_t l = 0; l < shape.linear_layers.size(); ++l)
    if (shape.linear_layers[l]) slot[l] = n++;
  data.assign(size_t(n) * (conv_floats + ssm_floats), 0.0f);
}

void RecurrentState::clear() {
  std::fill(data.begin(), data.end(), 0.0f);
}

bool RecurrentState::operator==(const RecurrentState& o) const {
  return data.size() == o.data.size() &&
         (data.empty() ||
          std::memcmp(data.data(), o.data.data(), data.size() * sizeof(float)) == 0);
}

void RecurrentState::write(std::string& out) const {
  out.append(reinterpret_cast<const char*>(data.data()), bytes());
}

void RecurrentState::read(const char* bytes_in, size_t n) {
  check(n == bytes(),
        "recurrent state of " + std::to_string(n) + " bytes, expected " + std::to_string(bytes()));
  if (n > 0) std::memcpy(data.data(), bytes_in, n);  // a model without recurrent layers: none
}

}  // namespace fak
