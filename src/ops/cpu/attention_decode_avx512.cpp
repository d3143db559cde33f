// AVX-512 decode attention: one new token for each of up to kMaxDecodeGroup sequences, over one KV
// head, in one pass over their keys. Built for agents cloned from one prompt: the keys of the
// shared prefix are read from memory once and each K element is one broadcast for every
// sequence's queries, instead of once per sequence.
//
// Layout: each sequence owns an 8-lane slot (its GQA group's heads, up to 8) of the score
// registers, so scores are a small GEMM with the queries in lanes (as the AVX2 tile). The weighted
// V sum has the head dimension in lanes instead: per key, one fma per 16 output elements with the
// probability broadcast, a quarter of the AVX2 tile's instructions for a 7-head group. Keys a
// sequence does not share (its own rows) are scored two sequences at a time, their lanes
// interleaved in one register (scores_pair), instead of each in a half-empty 8-lane slot.
//
// note: every output is the same bits as the AVX2 tile run on that sequence alone
// (attention_avx2.cpp, tested): a score is one fma chain over the head dimension, scaled once;
// the softmax max, the exp polynomial and the sum run over keys in order per lane (keys past a
// sequence's own count are -inf and add exact zeros); the output is one fma chain over keys per
// element, then one multiply by 1 / sum. Which lanes or registers hold the chain changes nothing.
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/avx512_warnings.h"  // first: before the intrinsics headers
#include "ops/attention_kernels.h"
#include "ops/cpu/attention_rows.h"
#include "ops/cpu/exp_avx512.h"
#include "ops/scratch.h"

namespace fak::kernels {

namespace {

constexpr int kKeyBlock = 32;  // rows widened (half types) and prefetched at a time
constexpr int kSlot = 8;       // lanes per sequence

// The K and V rows a group reads, in the order it reads them, prefetched a fixed distance ahead
// of their use. Decode reads every row once, from memory; without this the kernel waited on
// nearly every block (the hardware prefetcher restarts at each 32-row KV block, and the
// arithmetic per row is too little for out-of-order execution to run far ahead).
// The lines are issued one at a time between the arithmetic (owe, then pay from the inner loops),
// not a block's worth at once: a burst of 128 prefetches overran the core's fill buffers, and
// each prefetch past them held up everything behind it until a line arrived (perf: 43% of a
// 32k-context decode's samples on the instruction after a prefetch, 24% paced). Prefetching only
// each 4 KiB page's first line (the hardware streamer left to fetch the rest) or every other line
// was slower, and 24 or 96 rows ahead level with 48 (attention_bench, interleaved).
class RowStream {
 public:
  RowStream(size_t head_offset, size_t row_bytes)
      : segs_(segments()), off_(head_offset), bytes_(row_bytes) {
    segs_.clear();
  }
  void add(const uint8_t* const* plane, int from, int to) {
    if (from < to) segs_.push_back({plane, from, to});
  }
  // Issues the next n rows' prefetches now.
  void ahead(int n) {
    owe(n);
    settle();
  }
  // Adds n rows to the lines to issue (none for n <= 0); pay() and settle() issue them.
  void owe(int n) {
    if (n > 0) debt_ += size_t(n) * ((bytes_ + 63) / 64);
  }
  // Issues the next line owed, if any.
  [[gnu::always_inline]] void pay() {
    if (debt_ > 0) issue_line();
  }
  void settle() {
    while (debt_ > 0) issue_line();
  }

 private:
  void issue_line() {
    --debt_;
    if (seg_ >= segs_.size()) return;
    const Seg& sg = segs_[seg_];
    if (pos_ < sg.from) pos_ = sg.from;
    _mm_prefetch(reinterpret_cast<const char*>(sg.plane[pos_] + off_) + line_, _MM_HINT_T0);
    line_ += 64;
    if (line_ < bytes_) return;
    line_ = 0;
    if (++pos_ == sg.to) {
      ++seg_;
      pos_ = 0;
    }
  }
  struct Seg {
    const uint8_t* const* plane;
    int from, to;
  };
  static std::vector<Seg>& segments() {  // per thread, reused across calls
    thread_local std::vector<Seg> v;
    return v;
  }
  std::vector<Seg>& segs_;
  size_t off_, bytes_;
  size_t seg_ = 0, line_ = 0, debt_ = 0;
  int pos_ = 0;
};

constexpr int kPrefetchRows = 48;  // rows in flight ahead of the arithmetic

// Scores of KB keys for the lanes of NZ registers (every slot's queries against the same rows).
template <int HD, int NZ, int KB>
[[gnu::always_inline]] inline void scores_shared(const float* qt, const float* const* k,
                                                 float scale, float* s, __m512* mx) {
  constexpr int LW = 16 * NZ;
  __m512 acc[KB][NZ];
#pragma GCC unroll 8
  for (int b = 0; b < KB; ++b)
#pragma GCC unroll 3
    for (int v = 0; v < NZ; ++v) acc[b][v] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int d = 0; d < HD; ++d) {
    __m512 q[NZ];
#pragma GCC unroll 3
    for (int v = 0; v < NZ; ++v) q[v] = _mm512_loadu_ps(qt + d * LW + 16 * v);
#pragma GCC unroll 8
    for (int b = 0; b < KB; ++b) {
      const __m512 kb = _mm512_set1_ps(k[b][d]);
#pragma GCC unroll 3
      for (int v = 0; v < NZ; ++v) acc[b][v] = _mm512_fmadd_ps(q[v], kb, acc[b][v]);
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 8
  for (int b = 0; b < KB; ++b)
#pragma GCC unroll 3
    for (int v = 0; v < NZ; ++v) {
      const __m512 x = _mm512_mul_ps(acc[b][v], sc);
      mx[v] = _mm512_max_ps(mx[v], x);
      _mm512_storeu_ps(s + size_t(b) * LW + 16 * v, x);
    }
}

// Scores of KB keys for one slot's 8 lanes (a sequence's own rows past the shared prefix).
template <int HD, int LW, int KB>
[[gnu::always_inline]] inline void scores_slot(const float* qt, const float* const* k, float scale,
                                               float* s, __m256& mx) {
  __m256 acc[KB];
#pragma GCC unroll 8
  for (int b = 0; b < KB; ++b) acc[b] = _mm256_setzero_ps();
#pragma GCC unroll 2
  for (int d = 0; d < HD; ++d) {
    const __m256 q = _mm256_loadu_ps(qt + d * LW);
#pragma GCC unroll 8
    for (int b = 0; b < KB; ++b) acc[b] = _mm256_fmadd_ps(q, _mm256_set1_ps(k[b][d]), acc[b]);
  }
  const __m256 sc = _mm256_set1_ps(scale);
#pragma GCC unroll 8
  for (int b = 0; b < KB; ++b) {
    const __m256 x = _mm256_mul_ps(acc[b], sc);
    mx = _mm256_max_ps(mx, x);
    _mm256_storeu_ps(s + size_t(b) * LW, x);
  }
}

// 16 elements of a float K row (f32, f16, bf16) as f32. d is a multiple of 16.
[[gnu::always_inline]] inline __m512 load16(const uint8_t* row, DType dt, int d) {
  if (dt == DType::F32) return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + d);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row) + d / 16);
  if (dt == DType::F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// Keys [j0, j1) of two sequences a, b as pairs: kb[(j - j0) * HD + d] = {a's K[j][d], b's}. The
// values are exact for every KV type, as block_rows makes them (a blocked type's: one product
// code * scale, widened a block of 32 at a time so its scale is converted once).
template <int HD>
void pair_rows(const KvRows& a, const KvRows& b, int j0, int j1, float* kb) {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  auto store = [&](float* out, __m512 x, __m512 y) {
    _mm512_storeu_ps(out, _mm512_permutex2var_ps(x, lo, y));
    _mm512_storeu_ps(out + 16, _mm512_permutex2var_ps(x, hi, y));
  };
  if (dtype_blocked(a.dtype)) {  // both sequences' rows are one type (attend_decode_avx512)
    if constexpr (HD % 32 == 0) {
      const bool q8 = a.dtype == DType::Q8_0;
      const size_t block_bytes = q8 ? 34 : 18;
      for (int j = j0; j < j1; ++j) {
        const uint8_t* ra = a.k[j] + a.head_offset;
        const uint8_t* rb = b.k[j] + b.head_offset;
        float* out = kb + size_t(j - j0) * HD * 2;
        for (int d = 0; d < HD; d += 32, ra += block_bytes, rb += block_bytes) {
          __m512 x0, x1, y0, y1;
          widen_block16(ra, q8, x0, x1);
          widen_block16(rb, q8, y0, y1);
          store(out + 2 * d, x0, y0);
          store(out + 2 * d + 32, x1, y1);
        }
      }
    }
    return;
  }
  for (int j = j0; j < j1; ++j) {
    const uint8_t* ra = a.k[j] + a.head_offset;
    const uint8_t* rb = b.k[j] + b.head_offset;
    float* out = kb + size_t(j - j0) * HD * 2;
    for (int d = 0; d < HD; d += 16)
      store(out + 2 * d, load16(ra, a.dtype, d), load16(rb, b.dtype, d));
  }
}

// Scores of KB keys for two slots at once, from their own rows at the same key indices: lanes
// interleaved (slot a's head h in lane 2h, slot b's in 2h + 1), so one zmm FMA serves both
// sequences where scores_slot takes one ymm FMA each. qp: [HD][16] queries so interleaved; kb:
// pair_rows' output. Stores both slots' scores (adjacent in a row of s) and their max.
// kHalf > 0: the two "slots" are one lone sequence at keys j and j + kHalf (its heads use 8 of a
// register's lanes, so one slot alone leaves half of every FMA empty): key j's scores go to lanes
// 0..7 of row j, key j + kHalf's to lanes 0..7 of row j + kHalf, lanes 8..15 zero as an empty
// slot's. (attention_bench decode_1agent_16k_f16, one thread, interleaved: 23.6-24.4 -> 19.4-20.8
// ms.)
template <int HD, int KB, int kHalf = 0>
[[gnu::always_inline]] inline void scores_pair(const float* qp, const float* kb, float scale,
                                               float* s, size_t lw, __m512& mx, RowStream& stream) {
  const __m512i split = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  __m512 acc[KB];
#pragma GCC unroll 8
  for (int b = 0; b < KB; ++b) acc[b] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int d = 0; d < HD; ++d) {
    stream.pay();
    const __m512 q = _mm512_loadu_ps(qp + d * 16);
#pragma GCC unroll 8
    for (int b = 0; b < KB; ++b) {
      double pair;
      std::memcpy(&pair, kb + (size_t(b) * HD + size_t(d)) * 2, sizeof(pair));
      acc[b] = _mm512_fmadd_ps(q, _mm512_castpd_ps(_mm512_set1_pd(pair)), acc[b]);
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 8
  for (int b = 0; b < KB; ++b) {
    const __m512 x = _mm512_permutexvar_ps(split, _mm512_mul_ps(acc[b], sc));
    mx = _mm512_max_ps(mx, x);
    if constexpr (kHalf == 0) {
      _mm512_storeu_ps(s + size_t(b) * lw, x);
    } else {
      const __m512i high = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
      _mm512_storeu_ps(s + size_t(b) * lw, _mm512_maskz_mov_ps(0x00FF, x));
      _mm512_storeu_ps(s + size_t(b + kHalf) * lw,
                       _mm512_maskz_mov_ps(0x00FF, _mm512_permutexvar_ps(high, x)));
    }
  }
}

// Output of one slot over keys [j0, j1): acc[h][c] += p[h] * V[j][dims of chunk c], H heads,
// DC dimensions (DC / 16 registers) per call; `ot` holds the running sums between key blocks.
// v16(j, d): V[j][d, d + 16) as f32, from rows widened into a buffer (values_slot_widened) or from
// the rows as stored, converted where they are read (values_slot_rows: a lone sequence's f32 /
// f16 / bf16 rows, no buffer written and read back for every head; the same values, so the same
// bits; attention_bench decode_1agent_16k_f16, 2 threads: 15.3 / 15.3 / 16.9 -> 14.1 / 13.7 /
// 13.8 ms a step from L3 (FAK_BENCH_ONE_LAYER), decode_1agent_3k_f16 2.88-3.01 -> 2.63-2.77).
template <int HD, int LW, int H, int DC, class V16>
[[gnu::always_inline]] inline void values_slot(const float* s, V16 v16, int j0, int j1, int d0,
                                               bool first, float* ot, RowStream& stream) {
  constexpr int NC = DC / 16;
  __m512 acc[H][NC];
#pragma GCC unroll 8
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 2
    for (int c = 0; c < NC; ++c)
      acc[h][c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(ot + h * HD + d0 + 16 * c);
  for (int j = j0; j < j1; ++j) {
    stream.pay();
    const float* pj = s + size_t(j) * LW;
    __m512 x[NC];
#pragma GCC unroll 2
    for (int c = 0; c < NC; ++c) x[c] = v16(j, d0 + 16 * c);
#pragma GCC unroll 8
    for (int h = 0; h < H; ++h) {
      const __m512 p = _mm512_set1_ps(pj[h]);
#pragma GCC unroll 2
      for (int c = 0; c < NC; ++c) acc[h][c] = _mm512_fmadd_ps(p, x[c], acc[h][c]);
    }
  }
#pragma GCC unroll 8
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 2
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(ot + h * HD + d0 + 16 * c, acc[h][c]);
}

template <int HD, int LW, int H, int DC>
[[gnu::always_inline]] inline void values_slot_widened(const float* s, const float* const* v,
                                                       int j0, int j1, int d0, bool first,
                                                       float* ot, RowStream& stream) {
  values_slot<HD, LW, H, DC>(
      s, [&](int j, int d) { return _mm512_loadu_ps(v[j - j0] + d); }, j0, j1, d0, first, ot,
      stream);
}

template <int HD, int LW, int H, int DC>
[[gnu::always_inline]] inline void values_slot_rows(const float* s, const KvRows& r, int j0, int j1,
                                                    int d0, bool first, float* ot,
                                                    RowStream& stream) {
  values_slot<HD, LW, H, DC>(
      s, [&](int j, int d) { return load16(r.v[j] + r.head_offset, r.dtype, d); }, j0, j1, d0,
      first, ot, stream);
}

template <int HD, int NZ, int H>
void attend_group(const DecodeGroup& g, float scale) {
  constexpr int LW = 16 * NZ;
  constexpr int DC = HD < 32 ? HD : 32;
  const int n_seq = g.n;
  int n_max = 0, n_min = 1 << 30;
  for (int i = 0; i < n_seq; ++i) {
    n_max = g.seq[i].n_keys > n_max ? g.seq[i].n_keys : n_max;
    n_min = g.seq[i].n_keys < n_min ? g.seq[i].n_keys : n_min;
  }
  // Keys every sequence has and reads from the same rows; a lone sequence shares all its keys.
  const int shared = n_seq == 1 ? n_max : (g.shared_keys < n_min ? g.shared_keys : n_min);
  const bool half = g.seq[0].rows.dtype != DType::F32;
  constexpr int KB = 8;  // keys per register-tile step
  const size_t need = size_t(HD) * LW + size_t(n_max) * LW + size_t(n_seq) * H * HD +
                      (half ? size_t(kKeyBlock) * HD : 0) + size_t(HD) * 16 +
                      size_t(kKeyBlock) * HD * 2;
  auto* buf = static_cast<float*>(thread_scratch(ScratchSlot::kAttention, sizeof(float) * need));
  float* qt = buf;                     // [HD][LW]: queries transposed, slot i at lanes 8i..
  float* s = qt + size_t(HD) * LW;     // [n_max][LW]: scores, then probabilities
  float* ot = s + size_t(n_max) * LW;  // [n_seq][H][HD]: running outputs
  float* conv = ot + size_t(n_seq) * H * HD;
  float* qp = conv + (half ? size_t(kKeyBlock) * HD : 0);  // [HD][16]: a pair's queries
  float* kb = qp + size_t(HD) * 16;                        // [kKeyBlock][HD][2]: a pair's keys

  // Own keys of slots 2v and 2v + 1 up to the shorter one's count are scored as a pair (pass 1b);
  // own_from[i]: where slot i's single-slot scoring starts.
  int own_from[2 * NZ], pair_end[NZ];
  for (int i = 0; i < 2 * NZ; ++i) own_from[i] = shared;
  for (int v = 0; v < NZ; ++v) {
    pair_end[v] = shared;
    if (2 * v + 1 >= n_seq) continue;
    const int na = g.seq[2 * v].n_keys, nb = g.seq[2 * v + 1].n_keys;
    const int common = na < nb ? na : nb;
    if (common - shared < KB) continue;
    pair_end[v] = own_from[2 * v] = own_from[2 * v + 1] = common;
  }

  std::memset(qt, 0, sizeof(float) * size_t(HD) * LW);  // lanes of no query stay 0
  for (int i = 0; i < n_seq; ++i)
    for (int h = 0; h < H; ++h) {
      const float* q = g.seq[i].q + h * HD;
      for (int d = 0; d < HD; ++d) qt[d * LW + kSlot * i + h] = q[d];
    }

  // Every row the passes below read, in their order: shared K, each sequence's own K, then V
  // block by block (a shared block once, then each sequence's own rows of that block).
  const KvRows& r0 = g.seq[0].rows;
  RowStream stream(r0.head_offset, dtype_row_bytes(r0.dtype, HD));
  stream.add(r0.k, 0, shared);
  for (int v = 0; v < NZ; ++v)
    for (int j0 = shared; j0 < pair_end[v]; j0 += kKeyBlock) {
      const int j1 = j0 + kKeyBlock < pair_end[v] ? j0 + kKeyBlock : pair_end[v];
      stream.add(g.seq[2 * v].rows.k, j0, j1);
      stream.add(g.seq[2 * v + 1].rows.k, j0, j1);
    }
  for (int i = 0; i < n_seq; ++i) stream.add(g.seq[i].rows.k, own_from[i], g.seq[i].n_keys);
  for (int j0 = 0; j0 < n_max; j0 += kKeyBlock) {
    const int j1 = j0 + kKeyBlock;
    stream.add(r0.v, j0, j1 < shared ? j1 : shared);
    for (int i = 0; i < n_seq; ++i) {
      const int n = g.seq[i].n_keys;
      stream.add(g.seq[i].rows.v, j0 > shared ? j0 : shared, j1 < n ? j1 : n);
    }
  }
  stream.ahead(kPrefetchRows);

  // Pass 1a: the shared keys, all slots at once. The softmax max of each lane is kept on the way
  // (a max is exact, so where it is taken does not matter).
  __m512 mx[NZ];
  for (int v = 0; v < NZ; ++v) mx[v] = _mm512_set1_ps(-INFINITY);
  const float* kp[kKeyBlock];
  // A lone sequence: whole blocks as 16 pairs of keys (j, j + 16),
  // both keys in one register (scores_pair's kHalf); the same chains, so the same bits.
  const bool two_keys = n_seq == 1 && NZ == 1;
  if (two_keys) {
    const __m512i weave = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    for (int d = 0; d < HD; ++d)
      _mm512_storeu_ps(qp + d * 16, _mm512_permutexvar_ps(weave, _mm512_loadu_ps(qt + d * LW)));
  }
  __m512 mx_two = _mm512_set1_ps(-INFINITY);
  for (int j0 = 0; j0 < shared; j0 += kKeyBlock) {
    const int j1 = j0 + kKeyBlock < shared ? j0 + kKeyBlock : shared;
    if (two_keys && j1 - j0 == kKeyBlock) {
      constexpr int kHalf = kKeyBlock / 2;
      KvRows later = r0;  // keys j + kHalf, paired with keys j
      later.k = r0.k + kHalf;
      pair_rows<HD>(r0, later, j0, j0 + kHalf, kb);
      for (int j = j0; j < j0 + kHalf; j += KB) {
        stream.owe(2 * KB);
        scores_pair<HD, KB, kHalf>(qp, kb + size_t(j - j0) * HD * 2, scale, s + size_t(j) * LW, LW,
                                   mx_two, stream);
      }
      continue;
    }
    block_rows<HD>(r0.k, r0.head_offset, r0.dtype, j0, j1, conv, kp);
    int j = j0;
    for (; j + KB <= j1; j += KB) {
      stream.ahead(KB);
      scores_shared<HD, NZ, KB>(qt, kp + (j - j0), scale, s + size_t(j) * LW, mx);
    }
    for (; j < j1; ++j) {
      stream.ahead(1);
      scores_shared<HD, NZ, 1>(qt, kp + (j - j0), scale, s + size_t(j) * LW, mx);
    }
  }
  if (two_keys) {
    // Both halves' maxima into lanes 0..7; lanes 8..15 saw the zero scores an empty slot has.
    const __m512i high = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
    const __m512 both = _mm512_max_ps(mx_two, _mm512_permutexvar_ps(high, mx_two));
    mx[0] = _mm512_max_ps(mx[0], _mm512_mask_mov_ps(_mm512_setzero_ps(), 0x00FF, both));
  }
  // Pass 1b: each sequence's own keys, two slots at a time where both have them, then each in its
  // slot; -inf past its count (and 0 in unused slots).
  for (int v = 0; v < NZ; ++v) {
    if (pair_end[v] == shared) continue;
    const __m512i weave = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    for (int d = 0; d < HD; ++d)
      _mm512_storeu_ps(qp + d * 16,
                       _mm512_permutexvar_ps(weave, _mm512_loadu_ps(qt + d * LW + 16 * v)));
    __m512 mxp = _mm512_set1_ps(-INFINITY);
    float* sv = s + 16 * v;
    for (int j0 = shared; j0 < pair_end[v]; j0 += kKeyBlock) {
      const int j1 = j0 + kKeyBlock < pair_end[v] ? j0 + kKeyBlock : pair_end[v];
      pair_rows<HD>(g.seq[2 * v].rows, g.seq[2 * v + 1].rows, j0, j1, kb);
      int j = j0;
      for (; j + KB <= j1; j += KB) {
        stream.owe(2 * KB);
        scores_pair<HD, KB>(qp, kb + size_t(j - j0) * HD * 2, scale, sv + size_t(j) * LW, LW, mxp,
                            stream);
      }
      for (; j < j1; ++j) {
        stream.owe(2);
        scores_pair<HD, 1>(qp, kb + size_t(j - j0) * HD * 2, scale, sv + size_t(j) * LW, LW, mxp,
                           stream);
      }
    }
    mx[v] = _mm512_max_ps(mx[v], mxp);
  }
  for (int i = 0; i < 2 * NZ; ++i) {
    float* si = s + kSlot * i;
    const int n = i < n_seq ? g.seq[i].n_keys : shared;
    __m256 mxi = _mm256_set1_ps(-INFINITY);
    if (i < n_seq) {
      const KvRows& r = g.seq[i].rows;
      for (int j0 = own_from[i]; j0 < n; j0 += kKeyBlock) {
        const int j1 = j0 + kKeyBlock < n ? j0 + kKeyBlock : n;
        block_rows<HD>(r.k, r.head_offset, r.dtype, j0, j1, conv, kp);
        int j = j0;
        for (; j + KB <= j1; j += KB) {
          stream.ahead(KB);
          scores_slot<HD, LW, KB>(qt + kSlot * i, kp + (j - j0), scale, si + size_t(j) * LW, mxi);
        }
        for (; j < j1; ++j) {
          stream.ahead(1);
          scores_slot<HD, LW, 1>(qt + kSlot * i, kp + (j - j0), scale, si + size_t(j) * LW, mxi);
        }
      }
    }
    const __m256 fill = _mm256_set1_ps(i < n_seq ? -INFINITY : 0.0f);
    for (int j = n; j < n_max; ++j) _mm256_storeu_ps(si + size_t(j) * LW, fill);
    // This slot's half of its register: the max over its own keys too.
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    mx[i / 2] = _mm512_max_ps(
        mx[i / 2], i % 2 ? _mm512_insertf32x8(ninf, mxi, 1) : _mm512_insertf32x8(ninf, mxi, 0));
  }

  // Pass 2, block by block: softmax numerators and their sums in key order per lane, then the
  // outputs; a shared V block is read from memory once for all slots. Taking exp here rather
  // than in a pass of its own keeps rows streaming in while it runs.
  __m512 sum[NZ];
  for (int v = 0; v < NZ; ++v) sum[v] = _mm512_setzero_ps();
  const float* vp[kKeyBlock];
  const bool blocked = dtype_blocked(r0.dtype);  // every sequence's rows are one type
  for (int j0 = 0; j0 < n_max; j0 += kKeyBlock) {
    const int je = j0 + kKeyBlock < n_max ? j0 + kKeyBlock : n_max;
    softmax_numerators<NZ>(s, LW, j0, je, mx, sum);
    const int j1s = j0 + kKeyBlock < shared ? j0 + kKeyBlock : shared;
    for (int i = 0; i < n_seq; ++i) {
      const int n = g.seq[i].n_keys;
      if (j0 >= n) continue;
      const int j1 = j0 + kKeyBlock < n ? j0 + kKeyBlock : n;
      stream.owe((i == 0 ? j1s - j0 : 0) + (j1 > j1s ? j1 - (j0 > j1s ? j0 : j1s) : 0));
      // A lone sequence's float rows: read as stored. (Where several sequences share V rows,
      // widening them once for all reads less: attention_bench decode_5agents_2k_shared_f16 5.2
      // -> 5.5 ms converting per sequence.)
      if (n_seq == 1 && !blocked) {
        if constexpr (HD % 16 == 0) {
          for (int d0 = 0; d0 < HD; d0 += DC)
            values_slot_rows<HD, LW, H, DC>(s + kSlot * i, g.seq[i].rows, j0, j1, d0, j0 == 0,
                                            ot + size_t(i) * H * HD, stream);
          stream.settle();
          continue;
        }
      }
      // Shared rows were widened (blocked types) for the first sequence and are reused; a block
      // past or straddling the end of the shared keys is this sequence's own rows.
      if (i == 0 || j1 > j1s)
        block_rows<HD>(g.seq[i].rows.v, g.seq[i].rows.head_offset, g.seq[i].rows.dtype, j0, j1,
                       conv, vp);
      for (int d0 = 0; d0 < HD; d0 += DC)
        values_slot_widened<HD, LW, H, DC>(s + kSlot * i, vp, j0, j1, d0, j0 == 0,
                                           ot + size_t(i) * H * HD, stream);
      stream.settle();
      // A straddling block replaced the shared rows the next sequence needs.
      if (j1 > j1s && j0 < shared && i + 1 < n_seq)
        block_rows<HD>(r0.v, r0.head_offset, r0.dtype, j0, j1s, conv, vp);
    }
  }
  alignas(64) float inv[LW];
  for (int v = 0; v < NZ; ++v)
    _mm512_store_ps(inv + 16 * v, _mm512_div_ps(_mm512_set1_ps(1.0f), sum[v]));
  for (int i = 0; i < n_seq; ++i)
    for (int h = 0; h < H; ++h) {
      const __m512 iv = _mm512_set1_ps(inv[kSlot * i + h]);
      const float* o = ot + (size_t(i) * H + size_t(h)) * HD;
      float* out = g.seq[i].out + h * HD;
      for (int d = 0; d < HD; d += 16)
        _mm512_storeu_ps(out + d, _mm512_mul_ps(_mm512_loadu_ps(o + d), iv));
    }
}

template <int HD, int NZ>
bool attend_group_h(const DecodeGroup& g, float scale) {
  switch (g.heads) {
    case 1:
      attend_group<HD, NZ, 1>(g, scale);
      return true;
    case 2:
      attend_group<HD, NZ, 2>(g, scale);
      return true;
    case 3:
      attend_group<HD, NZ, 3>(g, scale);
      return true;
    case 4:
      attend_group<HD, NZ, 4>(g, scale);
      return true;
    case 5:
      attend_group<HD, NZ, 5>(g, scale);
      return true;
    case 6:
      attend_group<HD, NZ, 6>(g, scale);
      return true;
    case 7:
      attend_group<HD, NZ, 7>(g, scale);
      return true;
    case 8:
      attend_group<HD, NZ, 8>(g, scale);
      return true;
    default:
      return false;
  }
}

template <int HD>
bool attend_group_hd(const DecodeGroup& g, float scale) {
  switch ((g.n + 1) / 2) {
    case 1:
      return attend_group_h<HD, 1>(g, scale);
    case 2:
      return attend_group_h<HD, 2>(g, scale);
    case 3:
      return attend_group_h<HD, 3>(g, scale);
    default:
      return false;
  }
}

}  // namespace

bool attend_decode_avx512(const DecodeGroup& group, int head_dim, float scale) {
  if (group.n < 1 || group.n > kMaxDecodeGroup) return false;
  for (int i = 1; i < group.n; ++i)
    if (group.seq[i].rows.dtype != group.seq[0].rows.dtype) return false;
  switch (head_dim) {
    case 16:
      return attend_group_hd<16>(group, scale);
    case 32:
      return attend_group_hd<32>(group, scale);
    case 64:
      return attend_group_hd<64>(group, scale);
    case 128:
      return attend_group_hd<128>(group, scale);
    case 256:
      return attend_group_hd<256>(group, scale);
    default:
      return false;
  }
}

}  // namespace fak::kernels
