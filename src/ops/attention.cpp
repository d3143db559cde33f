#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/attention_kernels.h"
#include "ops/matmul_kernels.h"
#include "ops/vec.h"
#include "runtime/kv_cache.h"

namespace fak {

namespace {

size_t query_key_pairs(const std::vector<AttentionTask>& tasks, const AttentionShape& s) {
  size_t work = 0;
  for (const auto& t : tasks)
    work += size_t(t.n_tokens) * size_t(t.start_pos + t.n_tokens) * size_t(s.n_heads);
  return work;
}

// Tiled path: for each sequence and KV head, the queries of its GQA group over all new tokens
// (token-major, head-minor) are cut into tiles of kTileQueries; each tile is one work unit.
void attention_tiled(const std::vector<AttentionTask>& tasks, const KvCache& cache, int layer,
                     const AttentionShape& s) {
  struct Unit {
    int task, kv_head, first;  // first: index into the task's flattened (token, head) queries
    int pair_task = -1;        // a second one-token tile joins this one (AVX-512): its task
    int pair_kv_head = 0;      // and KV head
  };
  const int group = s.n_heads / s.n_kv_heads;
  const int bs = cache.block_size();
  const int q_dim = s.n_heads * s.head_dim;
  const size_t elem = dtype_size(cache.dtype());
  std::vector<Unit> units;
  const bool pair_decode = kernels::avx512_enabled();
  std::vector<int> decode_tasks;  // one-token tasks, whose tiles may be paired below
  // Each task's block table becomes two arrays of row pointers (one per position) once per call:
  // a division by the block size per key cost more than the key's arithmetic.
  std::vector<std::vector<const uint8_t*>> k_rows(tasks.size()), v_rows(tasks.size());
  for (size_t ti = 0; ti < tasks.size(); ++ti) {
    const AttentionTask& task = tasks[ti];
    for (int j = 0; j < task.start_pos + task.n_tokens; ++j) {
      const int32_t b = (*task.blocks)[size_t(j / bs)];
      k_rows[ti].push_back(cache.row(b, layer, KvPlane::K, j % bs));
      v_rows[ti].push_back(cache.row(b, layer, KvPlane::V, j % bs));
    }
    const int n_queries = task.n_tokens * group;
    // Decode steps of two sequences (one tile of at most 8 queries per KV head each) can share one
    // AVX-512 pass: half the instructions per shared key, whose rows are read once.
    if (pair_decode && task.n_tokens == 1 && group <= 8) {
      decode_tasks.push_back(int(ti));
      continue;
    }
    // Later tiles see more keys: queue them first so dynamic scheduling ends evenly.
    for (int first = ((n_queries - 1) / kernels::kTileQueries) * kernels::kTileQueries; first >= 0;
         first -= kernels::kTileQueries)
      for (int kvh = 0; kvh < s.n_kv_heads; ++kvh) units.push_back({int(ti), kvh, first});
  }
  // Two sequences' tiles of one KV head pair up when most of their keys are the same rows (a
  // prefix both were cloned from): those keys cost one broadcast for both halves. Where the rows
  // differ a pair costs more than two lone AVX2 tiles (measured: one 6k-context sequence's two KV
  // heads paired decoded in 47 ms a token, alone in 36), so unrelated sequences stay apart.
  auto shared_keys = [&](int a, int b) {
    const auto& ba = *tasks[size_t(a)].blocks;
    const auto& bb = *tasks[size_t(b)].blocks;
    size_t i = 0;
    while (i < ba.size() && i < bb.size() && ba[i] == bb[i]) ++i;
    return int(i) * bs;
  };
  std::vector<int> partner(decode_tasks.size(), -1);
  for (size_t i = 0; i < decode_tasks.size(); ++i) {
    if (partner[i] >= 0) continue;
    for (size_t j = i + 1; j < decode_tasks.size(); ++j) {
      if (partner[j] >= 0) continue;
      const int na = tasks[size_t(decode_tasks[i])].start_pos + 1;
      const int nb = tasks[size_t(decode_tasks[j])].start_pos + 1;
      if (5 * shared_keys(decode_tasks[i], decode_tasks[j]) >= 2 * std::max(na, nb)) {
        partner[i] = int(j);
        partner[j] = int(i);
        break;
      }
    }
  }
  for (size_t i = 0; i < decode_tasks.size(); ++i) {
    if (partner[i] >= 0 && partner[i] < int(i)) continue;  // queued with its partner
    for (int kvh = 0; kvh < s.n_kv_heads; ++kvh) {
      if (partner[i] >= 0)
        units.push_back({decode_tasks[i], kvh, 0, decode_tasks[size_t(partner[i])], kvh});
      else
        units.push_back({decode_tasks[i], kvh, 0});
    }
  }
  const auto tile_kernel =
      kernels::avx512_enabled() ? kernels::attend_tile_avx512 : kernels::attend_tile_avx2;
#pragma omp parallel if (query_key_pairs(tasks, s) * size_t(s.head_dim) > 64 * 1024)
  {
    kernels::AttentionScratch scratch;
#pragma omp for schedule(dynamic, 1)
    for (size_t u = 0; u < units.size(); ++u) {
      const Unit& un = units[u];
      auto make_tile = [&](int ti, int kv_head, kernels::AttentionTile& tile,
                           kernels::KvRows& rows) {
        const AttentionTask& task = tasks[size_t(ti)];
        const int n_queries = task.n_tokens * group;
        tile.n = std::min(kernels::kTileQueries, n_queries - un.first);
        for (int i = 0; i < tile.n; ++i) {
          const int token = (un.first + i) / group;
          const int head = kv_head * group + (un.first + i) % group;
          const size_t off = size_t(token) * size_t(q_dim) + size_t(head) * size_t(s.head_dim);
          tile.q[i] = task.q + off;
          tile.out[i] = task.out + off;
          tile.n_keys[i] = task.start_pos + token + 1;
        }
        rows = {k_rows[size_t(ti)].data(), v_rows[size_t(ti)].data(),
                size_t(kv_head) * size_t(s.head_dim) * elem, cache.dtype()};
      };
      kernels::AttentionTile tile;
      kernels::KvRows rows{};
      make_tile(un.task, un.kv_head, tile, rows);
      if (un.pair_task >= 0) {
        kernels::AttentionTile tile_b;
        kernels::KvRows rows_b{};
        make_tile(un.pair_task, un.pair_kv_head, tile_b, rows_b);
        if (kernels::attend_pair_avx512(tile, rows, tile_b, rows_b, s.head_dim, s.scale)) continue;
        tile_kernel(tile_b, rows_b, s.head_dim, s.scale, scratch);
      }
      tile_kernel(tile, rows, s.head_dim, s.scale, scratch);
    }
  }
}

// Portable path (no AVX2, or a head size without a tile kernel): one query head at a time.
void attention_generic(const std::vector<AttentionTask>& tasks, const KvCache& cache, int layer,
                       const AttentionShape& s) {
  struct Unit {
    int task, token, head;
  };
  const VecKernels& vk = vec_kernels();
  const int group = s.n_heads / s.n_kv_heads;
  const int bs = cache.block_size();
  std::vector<Unit> units;
  for (int ti = 0; ti < int(tasks.size()); ++ti)
    for (int t = 0; t < tasks[size_t(ti)].n_tokens; ++t)
      for (int h = 0; h < s.n_heads; ++h) units.push_back({ti, t, h});
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
#pragma omp parallel if (query_key_pairs(tasks, s) * size_t(s.head_dim) > 64 * 1024)
  {
    std::vector<float> scores;
#pragma omp for schedule(dynamic, 4)
    for (size_t u = 0; u < units.size(); ++u) {
      const Unit& un = units[u];
      const AttentionTask& task = tasks[size_t(un.task)];
      const int n_keys = task.start_pos + un.token + 1;
      const float* q =
          task.q + size_t(un.token) * size_t(q_dim) + size_t(un.head) * size_t(s.head_dim);
      float* out =
          task.out + size_t(un.token) * size_t(q_dim) + size_t(un.head) * size_t(s.head_dim);
      const size_t head_off = size_t(un.head / group) * size_t(s.head_dim) * elem;
      scores.resize(size_t(n_keys));
      float mx = -INFINITY;
      for (int j = 0; j < n_keys; ++j) {
        const uint8_t* krow =
            cache.row((*task.blocks)[size_t(j / bs)], layer, KvPlane::K, j % bs) + head_off;
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
        const uint8_t* vrow =
            cache.row((*task.blocks)[size_t(j / bs)], layer, KvPlane::V, j % bs) + head_off;
        axpy(out, scores[size_t(j)] * inv, vrow, s.head_dim);
      }
    }
  }
}

}  // namespace

void attention(const std::vector<AttentionTask>& tasks, const KvCache& cache, int layer,
               const AttentionShape& s) {
  if (kernels::cpu_has_avx2() && kernels::attend_tile_supported(s.head_dim))
    attention_tiled(tasks, cache, layer, s);
  else
    attention_generic(tasks, cache, layer, s);
}

void attention_reference(const std::vector<AttentionTask>& tasks, const KvCache& cache, int layer,
                         const AttentionShape& s) {
  attention_generic(tasks, cache, layer, s);
}

}  // namespace fak
