// AVX2 inner loops of attention for an f32 KV cache: one query head against its keys and values.
//
// note: per key, the score is computed with exactly the arithmetic of vec_avx2's dot (two
// accumulators over 16-element chunks, same horizontal sum) and the output accumulates
// p_j * v_j in key order with one fma per element, exactly like axpy — so results are identical
// to the generic path, only faster: four keys' dot products are in flight at once and the output
// row stays in registers across all keys.
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

// key(j) / value(j) give row pointers (already offset to the head).
template <int HD, typename KeyFn, typename ValueFn>
void attend(const float* q, int n_keys, float scale, KeyFn key, ValueFn value, float* scores, float* out) {
  float mx = -INFINITY;
  int j = 0;
  for (; j + 4 <= n_keys; j += 4) {
    const float* k[4] = {key(j), key(j + 1), key(j + 2), key(j + 3)};
    scores4<HD>(q, k, scores + j);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      scores[j + r] *= scale;
      mx = scores[j + r] > mx ? scores[j + r] : mx;
    }
  }
  for (; j < n_keys; ++j) {
    scores[j] = score1<HD>(q, key(j)) * scale;
    mx = scores[j] > mx ? scores[j] : mx;
  }
  float sum = 0.0f;
  for (int i = 0; i < n_keys; ++i) {
    const float e = std::exp(scores[i] - mx);
    scores[i] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
  __m256 acc[HD / 8];
#pragma GCC unroll 32
  for (int i = 0; i < HD / 8; ++i) acc[i] = _mm256_setzero_ps();
  for (int i = 0; i < n_keys; ++i) {
    const __m256 p = _mm256_set1_ps(scores[i] * inv);
    const float* v = value(i);
#pragma GCC unroll 32
    for (int e = 0; e < HD / 8; ++e) acc[e] = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 8 * e), acc[e]);
  }
#pragma GCC unroll 32
  for (int e = 0; e < HD / 8; ++e) _mm256_storeu_ps(out + 8 * e, acc[e]);
}

}  // namespace

// Returns false when head_dim has no specialised kernel (the caller uses the generic path).
bool attend_f32_avx2(const float* q, int n_keys, float scale, const uint8_t* const* blocks_k,
                     const uint8_t* const* blocks_v, int block_size, size_t row_bytes, size_t head_offset,
                     int head_dim, float* scores, float* out) {
  auto key = [&](int j) {
    return reinterpret_cast<const float*>(blocks_k[j / block_size] + size_t(j % block_size) * row_bytes + head_offset);
  };
  auto value = [&](int j) {
    return reinterpret_cast<const float*>(blocks_v[j / block_size] + size_t(j % block_size) * row_bytes + head_offset);
  };
  switch (head_dim) {
    case 64: attend<64>(q, n_keys, scale, key, value, scores, out); return true;
    case 128: attend<128>(q, n_keys, scale, key, value, scores, out); return true;
    case 32: attend<32>(q, n_keys, scale, key, value, scores, out); return true;
    case 16: attend<16>(q, n_keys, scale, key, value, scores, out); return true;
    case 256: attend<256>(q, n_keys, scale, key, value, scores, out); return true;
    default: return false;
  }
}

}  // namespace fak::kernels
