#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "memory/kv_cache.h"
#include "ops/attention_kernels.h"
#include "ops/matmul_kernels.h"
#include "ops/vec.h"
#include "quant/quant.h"

namespace fak {

namespace {

// The first key a query at position `pos` attends to.
int first_key(const AttentionShape& s, int pos) {
  return s.window > 0 ? std::max(0, pos - s.window + 1) : 0;
}

size_t query_key_pairs(const std::vector<AttentionTask>& tasks, const AttentionShape& s) {
  size_t work = 0;
  for (const auto& t : tasks)
    work += size_t(t.n_tokens) * size_t(t.start_pos + t.n_tokens) * size_t(s.n_heads);
  return work;
}

// Each task's block table as two arrays of row pointers (one per position), made once per call:
// a division by the block size per key cost more than the key's arithmetic. The arrays are kept
// between calls: at depth each is hundreds of KB, which fresh vectors took from the kernel (mmap,
// page faults, zeroing) on every call, a tenth of a decode step's attention at 16k.
// note: references to the thread_locals, so OpenMP workers see the caller's arrays.
struct RowPointers {
  std::vector<std::vector<const uint8_t*>>& k;
  std::vector<std::vector<const uint8_t*>>& v;
  // The first row each task reads (a block's first): 0, or on a windowed layer where its first
  // query's window starts, so rows no query reads are neither touched nor widened (a windowed
  // layer's older rows may be gone, memory/kv_cache.h). Pointers before it are not set.
  std::vector<int> first_row;
};

RowPointers row_pointers(const std::vector<AttentionTask>& tasks, const KvCache& cache, int layer,
                         const AttentionShape& s) {
  thread_local std::vector<std::vector<const uint8_t*>> tls_k_rows, tls_v_rows;
  RowPointers rp{tls_k_rows, tls_v_rows, std::vector<int>(tasks.size(), 0)};
  if (rp.k.size() < tasks.size()) {
    rp.k.resize(tasks.size());
    rp.v.resize(tasks.size());
  }
  const int bs = cache.block_size();
  const size_t rb = cache.head_bytes();  // rows of one head are contiguous in a block
  for (size_t ti = 0; ti < tasks.size(); ++ti) {
    const AttentionTask& task = tasks[ti];
    const int n = task.start_pos + task.n_tokens;
    rp.first_row[ti] = first_key(s, task.start_pos) / bs * bs;
    rp.k[ti].resize(size_t(n));
    rp.v[ti].resize(size_t(n));
    for (int j0 = rp.first_row[ti]; j0 < n; j0 += bs) {
      const int32_t b = (*task.blocks)[size_t(j0 / bs)];
      const uint8_t* k0 = cache.row(b, layer, KvPlane::K, 0);
      const uint8_t* v0 = cache.row(b, layer, KvPlane::V, 0);
      for (int j = j0; j < n && j < j0 + bs; ++j) {
        rp.k[ti][size_t(j)] = k0 + size_t(j - j0) * rb;
        rp.v[ti][size_t(j)] = v0 + size_t(j - j0) * rb;
      }
    }
  }
  return rp;
}

// Decode steps of sequences whose first keys are the same rows (a prefix they were cloned from)
// form groups of up to max_size: those rows are read once for all. Unrelated sequences stay alone:
// a group whose rows differ costs the same work in fewer, longer units.
struct DecodeGroup {
  std::vector<int> tasks;
  int shared = 1 << 30;  // keys [0, shared) are the same rows in every task of the group
};

std::vector<DecodeGroup> decode_groups(const std::vector<AttentionTask>& tasks,
                                       const std::vector<int>& decode_tasks, int bs, int max_size) {
  auto shared_keys = [&](int a, int b) {
    const auto& ba = *tasks[size_t(a)].blocks;
    const auto& bb = *tasks[size_t(b)].blocks;
    size_t i = 0;
    while (i < ba.size() && i < bb.size() && ba[i] == bb[i]) ++i;
    return int(i) * bs;
  };
  std::vector<DecodeGroup> groups;
  std::vector<bool> grouped(decode_tasks.size(), false);
  for (size_t i = 0; i < decode_tasks.size(); ++i) {
    if (grouped[i]) continue;
    DecodeGroup g;
    g.tasks.push_back(decode_tasks[i]);
    const int na = tasks[size_t(decode_tasks[i])].start_pos + 1;
    for (size_t j = i + 1; j < decode_tasks.size() && int(g.tasks.size()) < max_size; ++j) {
      if (grouped[j]) continue;
      const int nb = tasks[size_t(decode_tasks[j])].start_pos + 1;
      const int sk = shared_keys(decode_tasks[i], decode_tasks[j]);
      if (5 * sk >= 2 * std::max(na, nb)) {
        grouped[j] = true;
        g.tasks.push_back(decode_tasks[j]);
        g.shared = std::min(g.shared, sk);
      }
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

// The most a call widens into f32 copies (K and V of every widened row, kept per thread). Past it
// the tiles widen the rows they read themselves (block_rows): at depth that was as fast or faster
// (0.5B shape, pp512 at depth 16384, q8_0 / f16 KV: 163-183 / 161-169 tok/s widening everything,
// 175-196 / 163-184 widening nothing) and the copies were most of the KV's own size in peak RSS
// (64 MiB at depth 65536 on the 0.5B shape, 256 MiB on the Qwen3-30B-A3B cut).
constexpr size_t kMaxWidenedBytes = size_t(8) << 20;

// Tiled path: for each sequence and KV head, the queries of its GQA group over all new tokens
// (token-major, head-minor) are cut into tiles of up to kTileQueries (AVX-512; AVX2 takes 16);
// each tile is one work unit.
void attention_tiled(const std::vector<AttentionTask>& tasks, const KvCache& cache, int layer,
                     const AttentionShape& s) {
  struct Unit {
    int task, kv_head, first;  // first: index into the task's flattened (token, head) queries
    int group = -1;            // a decode group (AVX-512): its index, and its first query head
    int head0 = 0;
    int tiles = 1;  // consecutive tiles from `first` on (kernels::attend_tiles_avx512)
  };
  const int group = s.n_heads / s.n_kv_heads;
  const int bs = cache.block_size();
  const int q_dim = s.n_heads * s.head_dim;
  std::vector<Unit> units;
  // A windowed layer: a tile's rows view starts at its first token's first key, and each later
  // token's queries mask the keys before their own (AttentionTile::first_key: the same bits as a
  // tile of that token alone); decode groups, whose sequences share a prefix of rows from key 0,
  // are not used.
  const bool windowed = s.window > 0;
  // Decode groups have no sinks either (gpt-oss's full layers run one-token tiles).
  const bool group_decode = kernels::avx512_enabled() && !windowed && !s.sinks;
  // Every AVX-512 tile takes 48 queries, sinks or not (gpt-oss's full layers ran tiles of 16:
  // three times the rows widened and a third of the FMAs per broadcast).
  const int tile_queries =
      kernels::avx512_enabled() ? kernels::kTileQueries : kernels::kTileQueriesAvx2;
  std::vector<int> decode_tasks;  // one-token tasks, grouped below
  RowPointers rp = row_pointers(tasks, cache, layer, s);
  std::vector<std::vector<const uint8_t*>>& k_rows = rp.k;
  std::vector<std::vector<const uint8_t*>>& v_rows = rp.v;
  const std::vector<int>& first_row = rp.first_row;
  std::vector<int> widen_tasks;  // f16/bf16 rows read by several tiles: widened once, below
  size_t widened_total = 0;
  for (size_t ti = 0; ti < tasks.size(); ++ti) {
    const AttentionTask& task = tasks[ti];
    const int n = task.start_pos + task.n_tokens;
    const int n_queries = task.n_tokens * group;
    const size_t widen_bytes = size_t(n - first_row[ti]) * size_t(s.n_kv_heads * s.head_dim) * 8;
    if (task.n_tokens > 1 && cache.dtype() != DType::F32 && n_queries > tile_queries &&
        widened_total + widen_bytes <= kMaxWidenedBytes) {
      widen_tasks.push_back(int(ti));
      widened_total += widen_bytes;
    }
    if (group_decode && task.n_tokens == 1) {
      decode_tasks.push_back(int(ti));
      continue;
    }
    // Later tiles see more keys: queue them first so dynamic scheduling ends evenly. On AVX-512
    // (no window: every tile's rows start at key 0) full tiles go kMaxTilesPerUnit to a unit and
    // a partial last one alone.
    const int n_tiles = (n_queries + tile_queries - 1) / tile_queries;
    const int per_unit = kernels::avx512_enabled() && !windowed ? kernels::kMaxTilesPerUnit : 1;
    for (int end = n_tiles; end > 0;) {
      const bool partial = end == n_tiles && n_queries % tile_queries != 0;
      const int count = partial ? 1 : std::min(per_unit, end);
      end -= count;
      for (int kvh = 0; kvh < s.n_kv_heads; ++kvh)
        units.push_back({int(ti), kvh, end * tile_queries, -1, 0, count});
    }
  }
  const std::vector<DecodeGroup> groups =
      decode_groups(tasks, decode_tasks, bs, kernels::kMaxDecodeGroup);
  for (size_t gi = 0; gi < groups.size(); ++gi)
    for (int kvh = 0; kvh < s.n_kv_heads; ++kvh)
      for (int h0 = 0; h0 < group; h0 += kernels::kMaxDecodeHeads)
        units.push_back({groups[gi].tasks[0], kvh, 0, int(gi), h0});
  // A prefill task's tiles each read all its keys: with f16/bf16 rows each tile widened every row
  // again (10 tiles of a 64-token chunk, ~600 of a 4k prompt). Widen them once into f32 copies
  // (the widening is exact, so the tiles see the same values) and point the tiles there.
  // note: a reference, not the thread_local itself, so OpenMP workers see the caller's buffers.
  thread_local std::vector<std::vector<float>> tls_widened;
  std::vector<std::vector<float>>& widened = tls_widened;
  std::vector<bool> is_widened(tasks.size(), false);
  if (!widen_tasks.empty()) {
    if (widened.size() < widen_tasks.size()) widened.resize(widen_tasks.size());
    const int kv_dim = s.n_kv_heads * s.head_dim;
    constexpr int kRowsPerJob = 256;
    struct Job {
      int task, slot, j0;
    };
    std::vector<Job> jobs;
    // A task's widened rows are those from its first row on: n - first of them.
    auto widened_rows = [&](int ti) {
      return tasks[size_t(ti)].start_pos + tasks[size_t(ti)].n_tokens - first_row[size_t(ti)];
    };
    for (size_t w = 0; w < widen_tasks.size(); ++w) {
      const int ti = widen_tasks[w];
      const int n = tasks[size_t(ti)].start_pos + tasks[size_t(ti)].n_tokens;
      widened[w].resize(2 * size_t(widened_rows(ti)) * size_t(kv_dim));
      for (int j0 = first_row[size_t(ti)]; j0 < n; j0 += kRowsPerJob)
        jobs.push_back({ti, int(w), j0});
      is_widened[size_t(ti)] = true;
    }
#pragma omp parallel for schedule(dynamic, 1) if (jobs.size() > 1)
    for (size_t jb = 0; jb < jobs.size(); ++jb) {
      const Job& job = jobs[jb];
      const int n = tasks[size_t(job.task)].start_pos + tasks[size_t(job.task)].n_tokens;
      const int j1 = std::min(n, job.j0 + kRowsPerJob);
      const int rows = widened_rows(job.task), first = first_row[size_t(job.task)];
      // Widened as the cache keeps them: [head][position][head_dim], K then V.
      float* k = widened[size_t(job.slot)].data();
      float* v = k + size_t(rows) * size_t(kv_dim);
      for (int h = 0; h < s.n_kv_heads; ++h) {
        const size_t at = (size_t(h) * size_t(rows) + size_t(job.j0 - first)) * size_t(s.head_dim);
        const size_t off = size_t(h) * cache.head_stride();
        kernels::widen_rows(k_rows[size_t(job.task)].data() + job.j0, off, j1 - job.j0, s.head_dim,
                            cache.dtype(), k + at);
        kernels::widen_rows(v_rows[size_t(job.task)].data() + job.j0, off, j1 - job.j0, s.head_dim,
                            cache.dtype(), v + at);
      }
    }
    for (size_t w = 0; w < widen_tasks.size(); ++w) {
      const int ti = widen_tasks[w];
      const int n = tasks[size_t(ti)].start_pos + tasks[size_t(ti)].n_tokens;
      const int first = first_row[size_t(ti)];
      const float* k = widened[w].data();
      const float* v = k + size_t(widened_rows(ti)) * size_t(kv_dim);
      for (int j = first; j < n; ++j) {
        k_rows[size_t(ti)][size_t(j)] =
            reinterpret_cast<const uint8_t*>(k + size_t(j - first) * size_t(s.head_dim));
        v_rows[size_t(ti)][size_t(j)] =
            reinterpret_cast<const uint8_t*>(v + size_t(j - first) * size_t(s.head_dim));
      }
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
      // key0: the tile's first key (a windowed tile's rows start there).
      auto rows_of = [&](int ti, int kv_head, int key0 = 0) {
        const bool f32 = is_widened[size_t(ti)];
        const AttentionTask& task = tasks[size_t(ti)];
        const size_t widened_stride =
            size_t(task.start_pos + task.n_tokens - first_row[size_t(ti)]) * size_t(s.head_dim) *
            sizeof(float);
        return kernels::KvRows{k_rows[size_t(ti)].data() + key0, v_rows[size_t(ti)].data() + key0,
                               size_t(kv_head) * (f32 ? widened_stride : cache.head_stride()),
                               f32 ? DType::F32 : cache.dtype()};
      };
      // Returns the tile's first key: 0, or on a windowed layer its first token's window start.
      auto make_tile = [&](int ti, int kv_head, int first, kernels::AttentionTile& tile) {
        const AttentionTask& task = tasks[size_t(ti)];
        const int n_queries = task.n_tokens * group;
        tile.n = std::min(tile_queries, n_queries - first);
        const int key0 = first_key(s, task.start_pos + first / group);
        for (int i = 0; i < tile.n; ++i) {
          const int token = (first + i) / group;
          const int head = kv_head * group + (first + i) % group;
          const size_t off = size_t(token) * size_t(q_dim) + size_t(head) * size_t(s.head_dim);
          tile.q[i] = task.q + off;
          tile.out[i] = task.out + off;
          tile.n_keys[i] = task.start_pos + token + 1 - key0;
          tile.first_key[i] = first_key(s, task.start_pos + token) - key0;
          tile.sink[i] = s.sinks ? s.sinks[head] : -INFINITY;
        }
        return key0;
      };
      if (un.group >= 0) {
        const DecodeGroup& gr = groups[size_t(un.group)];
        kernels::DecodeGroup dg;
        dg.n = int(gr.tasks.size());
        dg.heads = std::min(kernels::kMaxDecodeHeads, group - un.head0);
        dg.shared_keys = gr.shared;
        const size_t off =
            (size_t(un.kv_head) * size_t(group) + size_t(un.head0)) * size_t(s.head_dim);
        for (int i = 0; i < dg.n; ++i) {
          const AttentionTask& task = tasks[size_t(gr.tasks[size_t(i)])];
          dg.seq[i] = {task.q + off, task.out + off, task.start_pos + 1,
                       rows_of(gr.tasks[size_t(i)], un.kv_head)};
        }
        if (kernels::attend_decode_avx512(dg, s.head_dim, s.scale)) continue;
        // No specialisation: each sequence's tile alone.
        for (int ti : gr.tasks) {
          kernels::AttentionTile tile;
          make_tile(ti, un.kv_head, un.head0, tile);
          tile.n = dg.heads;
          tile_kernel(tile, rows_of(ti, un.kv_head), s.head_dim, s.scale, scratch);
        }
        continue;
      }
      if (un.tiles > 1) {
        kernels::AttentionTile tiles[kernels::kMaxTilesPerUnit];
        for (int c = 0; c < un.tiles; ++c)
          make_tile(un.task, un.kv_head, un.first + c * tile_queries, tiles[c]);
        kernels::attend_tiles_avx512(tiles, un.tiles, rows_of(un.task, un.kv_head), s.head_dim,
                                     s.scale, scratch);
        continue;
      }
      kernels::AttentionTile tile;
      const int key0 = make_tile(un.task, un.kv_head, un.first, tile);
      tile_kernel(tile, rows_of(un.task, un.kv_head, key0), s.head_dim, s.scale, scratch);
    }
  }
}

// AMX path (f16 / bf16 rows): for each sequence and KV head, the queries of its GQA group over all
// new tokens (token-major, head-minor) in units of kAmxUnitQueries, one work unit each; a unit
// converts the rows it reads into the tile unit's layout block by block as it goes. (Packing a
// call's rows once for all its units instead was 15% slower at depth 16384 on the Qwen3-30B-A3B
// shape: the packed rows, four times the f16 bytes, came from memory for every unit.)
void attention_amx(const std::vector<AttentionTask>& tasks, const KvCache& cache, int layer,
                   const AttentionShape& s) {
  constexpr int kUnit = kernels::kAmxUnitQueries;
  const int group = s.n_heads / s.n_kv_heads, hd = s.head_dim;
  const int q_dim = s.n_heads * hd;
  RowPointers rp = row_pointers(tasks, cache, layer, s);
  struct Unit {
    int task, kv_head, first;
    int group = -1;  // a decode group's index
  };
  std::vector<Unit> units;
  // One-token tasks cloned from one prefix decode as one unit per KV head, a q-tile per sequence
  // (GQA groups of up to 16 heads, no window).
  const bool grouping = s.window == 0 && group <= 16;
  std::vector<int> decode_tasks;
  for (size_t ti = 0; ti < tasks.size(); ++ti) {
    if (grouping && tasks[ti].n_tokens == 1) {
      decode_tasks.push_back(int(ti));
      continue;
    }
    const int n_queries = tasks[ti].n_tokens * group;
    // Later units see more keys: queue them first so dynamic scheduling ends evenly.
    for (int first = ((n_queries - 1) / kUnit) * kUnit; first >= 0; first -= kUnit)
      for (int kvh = 0; kvh < s.n_kv_heads; ++kvh) units.push_back({int(ti), kvh, first});
  }
  const std::vector<DecodeGroup> groups =
      decode_groups(tasks, decode_tasks, cache.block_size(), kUnit / 16);
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    // The blocks all sequences share are read through the longest one's rows: its row pointers
    // reach every key a shared block holds (a shorter sequence's may end inside one).
    int longest = groups[gi].tasks[0];
    for (int ti : groups[gi].tasks)
      if (tasks[size_t(ti)].start_pos > tasks[size_t(longest)].start_pos) longest = ti;
    for (int kvh = 0; kvh < s.n_kv_heads; ++kvh) units.push_back({longest, kvh, 0, int(gi)});
  }
  auto rows_of = [&](int ti, int kv_head) {
    return kernels::KvRows{rp.k[size_t(ti)].data(), rp.v[size_t(ti)].data(),
                           size_t(kv_head) * cache.head_stride(), cache.dtype()};
  };
#pragma omp parallel if (query_key_pairs(tasks, s) * size_t(hd) > 64 * 1024)
  {
#pragma omp for schedule(dynamic, 1)
    for (size_t u = 0; u < units.size(); ++u) {
      const Unit& un = units[u];
      kernels::AmxUnit unit;
      // Query `first + i` of task ti (token-major, head-minor) into lane `lane`.
      auto place = [&](int ti, int first, int i, int lane) {
        const AttentionTask& task = tasks[size_t(ti)];
        const int token = (first + i) / group;
        const int head = un.kv_head * group + (first + i) % group;
        const size_t off = size_t(token) * size_t(q_dim) + size_t(head) * size_t(hd);
        unit.q[lane] = task.q + off;
        unit.out[lane] = task.out + off;
        unit.n_keys[lane] = task.start_pos + token + 1;
        unit.first_key[lane] = first_key(s, task.start_pos + token);
        unit.sink[lane] = s.sinks ? s.sinks[head] : -INFINITY;
      };
      if (un.group >= 0) {
        const DecodeGroup& g = groups[size_t(un.group)];
        unit.n = 16 * int(g.tasks.size());
        unit.n_tile_rows = int(g.tasks.size());
        unit.shared_keys = g.shared;
        for (size_t k = 0; k < g.tasks.size(); ++k) {
          const int ti = g.tasks[k];
          for (int i = 0; i < 16; ++i) {
            const int lane = 16 * int(k) + i;
            place(ti, 0, std::min(i, group - 1), lane);
            if (i >= group) unit.q[lane] = unit.out[lane] = nullptr;  // unused
          }
          unit.tile_rows[k] = rows_of(ti, un.kv_head);
        }
      } else {
        const AttentionTask& task = tasks[size_t(un.task)];
        unit.n = std::min(kUnit, task.n_tokens * group - un.first);
        for (int i = 0; i < unit.n; ++i) place(un.task, un.first, i, i);
      }
      kernels::attend_unit_amx(unit, rows_of(un.task, un.kv_head), rp.first_row[size_t(un.task)],
                               hd, s.scale);
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
  // Row readers for the cache's storage type, picked once per call.
  thread_local std::vector<float> wide;  // a Q8_0 / Q4_0 row, dequantised
  const QuantType blocked = kv_block_type(cache.dtype());
  auto dot = [&vk, blocked, dt = cache.dtype()](const float* q, const uint8_t* row, int n) {
    if (dtype_blocked(dt)) {
      wide.resize(size_t(n));
      dequantize_row(blocked, row, wide.data(), n);
      return vk.dot(q, wide.data(), n);
    }
    if (dt == DType::F32) return vk.dot(q, reinterpret_cast<const float*>(row), n);
    if (dt == DType::F16) return vk.dot_f16(q, reinterpret_cast<const uint16_t*>(row), n);
    return vk.dot_bf16(q, reinterpret_cast<const uint16_t*>(row), n);
  };
  auto axpy = [&vk, blocked, dt = cache.dtype()](float* y, float a, const uint8_t* row, int n) {
    if (dtype_blocked(dt)) {
      wide.resize(size_t(n));
      dequantize_row(blocked, row, wide.data(), n);
      return vk.axpy(y, a, wide.data(), n);
    }
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
      const int key0 = first_key(s, task.start_pos + un.token);
      const int n_keys = task.start_pos + un.token + 1;
      const float* q =
          task.q + size_t(un.token) * size_t(q_dim) + size_t(un.head) * size_t(s.head_dim);
      float* out =
          task.out + size_t(un.token) * size_t(q_dim) + size_t(un.head) * size_t(s.head_dim);
      const size_t head_off = size_t(un.head / group) * cache.head_stride();
      scores.resize(size_t(n_keys));
      // The sink (ops/attention.h) starts the max and the sum; without one, -inf and +0.
      const float sink = s.sinks ? s.sinks[un.head] : -INFINITY;
      float mx = sink;
      for (int j = key0; j < n_keys; ++j) {
        const uint8_t* krow =
            cache.row((*task.blocks)[size_t(j / bs)], layer, KvPlane::K, j % bs) + head_off;
        const float sc = dot(q, krow, s.head_dim) * s.scale;
        scores[size_t(j)] = sc;
        mx = sc > mx ? sc : mx;
      }
      float sum = std::exp(sink - mx);
      for (int j = key0; j < n_keys; ++j) {
        float e = std::exp(scores[size_t(j)] - mx);
        scores[size_t(j)] = e;
        sum += e;
      }
      const float inv = 1.0f / sum;
      std::memset(out, 0, sizeof(float) * size_t(s.head_dim));
      for (int j = key0; j < n_keys; ++j) {
        const uint8_t* vrow =
            cache.row((*task.blocks)[size_t(j / bs)], layer, KvPlane::V, j % bs) + head_off;
        axpy(out, scores[size_t(j)] * inv, vrow, s.head_dim);
      }
    }
  }
}

}  // namespace

namespace kernels {

bool amx_attention_enabled() {
  return amx_enabled() && cpu_features().amx_bf16;
}

bool amx_attention_supported(int head_dim, DType dtype) {
  return (head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256) &&
         (dtype == DType::F16 || dtype == DType::BF16);
}

}  // namespace kernels

void attention(const std::vector<AttentionTask>& tasks, const KvCache& cache, int layer,
               const AttentionShape& s) {
  if (kernels::amx_attention_enabled() &&
      kernels::amx_attention_supported(s.head_dim, cache.dtype()))
    attention_amx(tasks, cache, layer, s);
  else if (kernels::cpu_has_avx2() && kernels::attend_tile_supported(s.head_dim))
    attention_tiled(tasks, cache, layer, s);
  else
    attention_generic(tasks, cache, layer, s);
}

void attention_reference(const std::vector<AttentionTask>& tasks, const KvCache& cache, int layer,
                         const AttentionShape& s) {
  attention_generic(tasks, cache, layer, s);
}

}  // namespace fak
