#include <cmath>

#include "ops/ops.h"
#include "ops/vec.h"

namespace fak {

void rmsnorm(const float* x, const float* weight, int n, float eps, float* out) {
  const double ss = vec_kernels().sum_squares(x, n);
  const float scale = float(1.0 / std::sqrt(ss / n + double(eps)));
  if (weight) {
    for (int i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
  } else {
    for (int i = 0; i < n; ++i) out[i] = x[i] * scale;
  }
}

void rope_apply(float* head, int rot, const float* cos, const float* sin) {
  const int half = rot / 2;
  for (int i = 0; i < half; ++i) {
    float a = head[i], b = head[i + half];
    head[i] = a * cos[i] - b * sin[i];
    head[i + half] = b * cos[i] + a * sin[i];
  }
}

void add_inplace(float* x, const float* y, int n) {
  for (int i = 0; i < n; ++i) x[i] += y[i];
}

void softmax_inplace(float* x, int n) {
  float mx = x[0];
  for (int i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace fak
