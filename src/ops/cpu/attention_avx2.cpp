// AVX2 inner loops of attention for an f32 KV cache: the query heads of one GQA group against
// their shared keys and values.
//
// note: per key, the score is computed with exactly the arithmetic of vec_avx2's dot (two
// accumulators over 16-element chunks, same horizontal sum) and the output accumulates
// p_j * v_j in key order with one fma per element, exactly like axpy — so results are identical
// to the generic path, only faster: four keys' dot products are in flight at once, each head's
// output stays in registers across a block of keys, and K/V rows are read once per group.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

namespace fak::kernels {

namespace {

inline float hsum2(__m256 acc0, __m256 acc1) {
  __m256 acc = _mm256_add_ps(acc0, acc1);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <int HD>
inline void scores4(const float* q, const float* const* k, float* out) {
  __m256 a0[4], a1[4];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
#pragma GCC unroll 16
  for (int i = 0; i < HD; i += 16) {
    const __m256 q0 = _mm256_loadu_ps(q + i), q1 = _mm256_loadu_ps(q + i + 8);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      a0[r] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(k[r] + i), a0[r]);
      a1[r] = _mm256_fmadd_ps(q1, _mm256_loadu_ps(k[r] + i + 8), a1[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) out[r] = hsum2(a0[r], a1[r]);
}

template <int HD>
inline float score1(const float* q, const float* k) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
#pragma GCC unroll 16
  for (int i = 0; i < HD; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(k + i + 8), a1);
  }
  return hsum2(a0, a1);
}

// All `group` query heads that share one KV head, against keys [0, n_keys). Keys are walked in
// blocks small enough to stay in L1, and every head of the group uses a block before the next is
// loaded: K and V come from memory once per group instead of once per head.
// note: per head the arithmetic is exactly the single-head order (scores4/score1 per key; the
// output accumulates p_j * v_j in key order, parked in `out` between blocks, which is exact).
template <int HD, typename KeyFn, typename ValueFn>
void attend_group(const float* q, int group, int n_keys, float scale, KeyFn key, ValueFn value,
                  float* scores, float* out) {
  constexpr int kBlock = 64;
  for (int j0 = 0; j0 < n_keys; j0 += kBlock) {
    const int j1 = j0 + kBlock < n_keys ? j0 + kBlock : n_keys;
    for (int g = 0; g < group; ++g) {
      const float* qg = q + g * HD;
      float* sg = scores + size_t(g) * size_t(n_keys);
      int j = j0;
      for (; j + 4 <= j1; j += 4) {
        const float* k[4] = {key(j), key(j + 1), key(j + 2), key(j + 3)};
        scores4<HD>(qg, k, sg + j);
      }
      for (; j < j1; ++j) sg[j] = score1<HD>(qg, key(j));
    }
  }
  for (int g = 0; g < group; ++g) {
    float* sg = scores + size_t(g) * size_t(n_keys);
    float mx = -INFINITY;
    for (int j = 0; j < n_keys; ++j) {
      sg[j] *= scale;
      mx = sg[j] > mx ? sg[j] : mx;
    }
    float sum = 0.0f;
    for (int i = 0; i < n_keys; ++i) {
      const float e = std::exp(sg[i] - mx);
      sg[i] = e;
      sum += e;
    }
    const float inv = 1.0f / sum;
    for (int i = 0; i < n_keys; ++i) sg[i] *= inv;
  }
  for (int j0 = 0; j0 < n_keys; j0 += kBlock) {
    const int j1 = j0 + kBlock < n_keys ? j0 + kBlock : n_keys;
    for (int g = 0; g < group; ++g) {
      const float* sg = scores + size_t(g) * size_t(n_keys);
      float* og = out + g * HD;
      __m256 acc[HD / 8];
#pragma GCC unroll 32
      for (int e = 0; e < HD / 8; ++e) acc[e] = j0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(og + 8 * e);
      for (int i = j0; i < j1; ++i) {
        const __m256 p = _mm256_set1_ps(sg[i]);
        const float* v = value(i);
#pragma GCC unroll 32
        for (int e = 0; e < HD / 8; ++e) acc[e] = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 8 * e), acc[e]);
      }
#pragma GCC unroll 32
      for (int e = 0; e < HD / 8; ++e) _mm256_storeu_ps(og + 8 * e, acc[e]);
    }
  }
}

}  // namespace

// Returns false when head_dim has no specialised kernel (the caller uses the generic path).
// k_rows[j] / v_rows[j]: row j of the K / V plane (position j), before the head offset. q and out
// hold `group` consecutive heads; scores has room for group * n_keys floats.
// note: row pointers are resolved once per call, not per key: a division by the block size per
// key and head cost more than the dot product itself.
bool attend_group_f32_avx2(const float* q, int group, int n_keys, float scale, const uint8_t* const* k_rows,
                           const uint8_t* const* v_rows, size_t head_offset, int head_dim, float* scores,
                           float* out) {
  auto key = [&](int j) { return reinterpret_cast<const float*>(k_rows[j] + head_offset); };
  auto value = [&](int j) { return reinterpret_cast<const float*>(v_rows[j] + head_offset); };
  switch (head_dim) {
    case 64: attend_group<64>(q, group, n_keys, scale, key, value, scores, out); return true;
    case 128: attend_group<128>(q, group, n_keys, scale, key, value, scores, out); return true;
    case 32: attend_group<32>(q, group, n_keys, scale, key, value, scores, out); return true;
    case 16: attend_group<16>(q, group, n_keys, scale, key, value, scores, out); return true;
    case 256: attend_group<256>(q, group, n_keys, scale, key, value, scores, out); return true;
    default: return false;
  }
}

}  // namespace fak::kernels
