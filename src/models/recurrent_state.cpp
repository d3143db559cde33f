#include "models/recurrent_state.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace fak {

RecurrentState::RecurrentState(const ModelConfig& c) {
  if (!c.is_hybrid()) return;
  const size_t key_dim = size_t(c.linear_num_key_heads) * size_t(c.linear_key_head_dim);
  const size_t value_dim = size_t(c.linear_num_value_heads) * size_t(c.linear_value_head_dim);
  conv_floats = (2 * key_dim + value_dim) * size_t(c.linear_conv_kernel - 1);
  ssm_floats = size_t(c.linear_num_value_heads) * size_t(c.linear_key_head_dim) *
               size_t(c.linear_value_head_dim);
  int n = 0;
  slot.assign(size_t(c.n_layers), -1);
  for (int l = 0; l < c.n_layers; ++l)
    if (c.layer_kinds[size_t(l)] == LayerKind::LinearAttention) slot[size_t(l)] = n++;
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
