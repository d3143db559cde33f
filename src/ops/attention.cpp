#include "ops/attention.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "ops/vec.h"
#include "runtime/kv_cache.h"

namespace fak {

namespace kernels {
bool attend_group_f32_avx2(const float* q, int group, int n_keys, float scale, const uint8_t* const* k_rows,
                           const uint8_t* const* v_rows, size_t head_offset, int head_dim, float* scores,
                           float* out);
bool cpu_has_avx2();
}  // namespace kernels

void attention(const std::vector<AttentionTask>& tasks, const KvCache& cache, int layer,
               const AttentionShape& s) {
  struct Unit {
    int task, token, head;
  };
  const VecKernels& vk = vec_kernels();
  const int group = s.n_heads / s.n_kv_heads;
  const int bs = cache.block_size();
  // Fast path: f32 rows with an AVX2 kernel for this head size, one work unit per GQA group.
  const bool fast = cache.dtype() == DType::F32 && kernels::cpu_has_avx2() && s.head_dim % 16 == 0 &&
                    s.head_dim <= 256 && (s.head_dim & (s.head_dim - 1)) == 0;
  const int heads_per_unit = fast ? group : 1;
  std::vector<Unit> units;
  for (int ti = 0; ti < int(tasks.size()); ++ti)
    for (int t = 0; t < tasks[size_t(ti)].n_tokens; ++t)
      for (int h = 0; h < s.n_heads; h += heads_per_unit) units.push_back({ti, t, h});
  const size_t elem = dtype_size(cache.dtype());
  // Row readers for the cache's storage type, picked once per call.
  auto dot = [&vk, dt = cache.dtype()](const float* q, const uint8_t* row, int n) {
    if (dt == DType::F32) return vk.dot(q, reinterpret_cast<const float*>(row), n);
    if (dt == DType::F16) return vk.dot_f16(q, reinterpret_cast<const uint16_t*>(row), n);
    return vk.dot_bf16(q, reinterpret_cast<const uint16_t*>(row), n);
  };
  auto axpy = [&vk, dt = cache.dtype()](float* y, float a, const uint8_t* row, int n) {
    if (dt == DType::F32) return vk.axpy(y, a, reinterpret_cast<const float*>(row), n);
    if (dt == DType::F16) return vk.axpy_f16(y, a, reinterpret_cast<const uint16_t*>(row), n);
    return vk.axpy_bf16(y, a, reinterpret_cast<const uint16_t*>(row), n);
  };
  const int q_dim = s.n_heads * s.head_dim;
  // Each task's block table becomes two arrays of row pointers (one per position) once per call.
  std::vector<std::vector<const uint8_t*>> k_planes(tasks.size()), v_planes(tasks.size());
  if (fast)
    for (size_t ti = 0; ti < tasks.size(); ++ti)
      for (int j = 0; j < tasks[ti].start_pos + tasks[ti].n_tokens; ++j) {
        const int32_t b = (*tasks[ti].blocks)[size_t(j / bs)];
        k_planes[ti].push_back(cache.row(b, layer, KvPlane::K, j % bs));
        v_planes[ti].push_back(cache.row(b, layer, KvPlane::V, j % bs));
      }

  size_t work = 0;  // query-key pairs
  for (const auto& t : tasks) work += size_t(t.n_tokens) * size_t(t.start_pos + t.n_tokens) * size_t(s.n_heads);
#pragma omp parallel if (work * size_t(s.head_dim) > 64 * 1024)
  {
    std::vector<float> scores;
#pragma omp for schedule(dynamic, 4)
    for (size_t u = 0; u < units.size(); ++u) {
      const Unit& un = units[u];
      const AttentionTask& task = tasks[size_t(un.task)];
      const int pos = task.start_pos + un.token;
      const int n_keys = pos + 1;
      const float* q = task.q + size_t(un.token) * size_t(q_dim) + size_t(un.head) * size_t(s.head_dim);
      float* out = task.out + size_t(un.token) * size_t(q_dim) + size_t(un.head) * size_t(s.head_dim);
      const size_t head_off = size_t(un.head / group) * size_t(s.head_dim) * elem;
      if (fast) {
        scores.resize(size_t(n_keys) * size_t(group));
        if (kernels::attend_group_f32_avx2(q, group, n_keys, s.scale, k_planes[size_t(un.task)].data(),
                                           v_planes[size_t(un.task)].data(), head_off, s.head_dim,
                                           scores.data(), out))
          continue;
      }
      scores.resize(size_t(n_keys));
      float mx = -INFINITY;
      for (int j = 0; j < n_keys; ++j) {
        const uint8_t* krow = cache.row((*task.blocks)[size_t(j / bs)], layer, KvPlane::K, j % bs) + head_off;
        const float sc = dot(q, krow, s.head_dim) * s.scale;
        scores[size_t(j)] = sc;
        mx = sc > mx ? sc : mx;
      }
      float sum = 0.0f;
      for (int j = 0; j < n_keys; ++j) {
        float e = std::exp(scores[size_t(j)] - mx);
        scores[size_t(j)] = e;
        sum += e;
      }
      const float inv = 1.0f / sum;
      std::memset(out, 0, sizeof(float) * size_t(s.head_dim));
      for (int j = 0; j < n_keys; ++j) {
        const uint8_t* vrow = cache.row((*task.blocks)[size_t(j / bs)], layer, KvPlane::V, j % bs) + head_off;
        axpy(out, scores[size_t(j)] * inv, vrow, s.head_dim);
      }
    }
  }
}

}  // namespace fak
