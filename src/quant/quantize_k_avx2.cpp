// AVX2 sub-block fits for K-quant weight quantizing: the searches of fit_k4_super_block_ref and
// fit_q6_k_scales_ref (quantize_k_ref.cpp) with one sub-block per lane (q4_K / q5_K: the 8 of a
// super-block; q6_K: its 16 in two passes of 8), so each lane runs one sub-block's scalar steps in
// the same order: the same sums, the same candidate scales, the same comparisons. The bits equal
// the reference's (tested), so a conversion writes the same file on either.
//
// note: this file is built with -ffp-contract=off (CMakeLists.txt): the reference runs at baseline
// x86-64, where no multiply and add fuse, and a fused one here would round differently.
#include <immintrin.h>

#include <cstdint>

#include "quant/kernels_internal.h"

namespace fak::quant {

namespace {

constexpr int kSub = 32;  // elements per sub-block; lane j holds sub-block j

// Round to nearest even, then clamp to [0, nmax], as `std::clamp(int(std::rint(v)), 0, nmax)`
// (out-of-range and NaN convert to INT_MIN, which clamps to 0 in both).
inline __m256i codes_of(__m256 v, __m256i nmax) {
  const __m256 r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(r), _mm256_setzero_si256()), nmax);
}

// Σ_i w_i (scale q_i + offset - x_i)², in element order per lane.
inline __m256 error_of(const __m256* x, const __m256* w, const __m256i* q, __m256 scale,
                       __m256 offset) {
  __m256 err = _mm256_setzero_ps();
  for (int i = 0; i < kSub; ++i) {
    const __m256 diff =
        _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(scale, _mm256_cvtepi32_ps(q[i])), offset), x[i]);
    err = _mm256_add_ps(err, _mm256_mul_ps(_mm256_mul_ps(w[i], diff), diff));
  }
  return err;
}

}  // namespace

void fit_k4_super_block_avx2(const float* xs, int nmax, uint8_t* codes, float* scales,
                             float* mins) {
  __m256 x[kSub], w[kSub];
  __m256i best_q[kSub], cand[kSub];
  const __m256i lane_at = _mm256_setr_epi32(0, 32, 64, 96, 128, 160, 192, 224);
  for (int i = 0; i < kSub; ++i) x[i] = _mm256_i32gather_ps(xs + i, lane_at, 4);

  // Weights: the sub-block's RMS plus |x|.
  __m256 sum_x2 = _mm256_setzero_ps();
  for (int i = 0; i < kSub; ++i) sum_x2 = _mm256_add_ps(sum_x2, _mm256_mul_ps(x[i], x[i]));
  const __m256 av = _mm256_sqrt_ps(_mm256_div_ps(sum_x2, _mm256_set1_ps(32.0f)));
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int i = 0; i < kSub; ++i) w[i] = _mm256_add_ps(av, _mm256_andnot_ps(sign, x[i]));

  // fit_scale_min, lane by lane.
  __m256 lo = x[0], hi = x[0], sum_w = w[0], sum_x = _mm256_mul_ps(w[0], x[0]);
  for (int i = 1; i < kSub; ++i) {
    lo = _mm256_min_ps(x[i], lo);  // x < lo ? x : lo, as std::min(lo, x)
    hi = _mm256_max_ps(x[i], hi);  // x > hi ? x : hi, as std::max(hi, x)
    sum_w = _mm256_add_ps(sum_w, w[i]);
    sum_x = _mm256_add_ps(sum_x, _mm256_mul_ps(w[i], x[i]));
  }
  const __m256 zero = _mm256_setzero_ps();
  lo = _mm256_blendv_ps(lo, zero, _mm256_cmp_ps(lo, zero, _CMP_GT_OQ));
  const __m256 flat = _mm256_cmp_ps(hi, lo, _CMP_LE_OQ);  // such a lane's codes are all 0
  const __m256 flat_lo = lo;
  const __m256i nmax_v = _mm256_set1_epi32(nmax);
  const __m256 nmax_f = _mm256_set1_ps(float(nmax));

  __m256 iscale = _mm256_div_ps(nmax_f, _mm256_sub_ps(hi, lo));
  __m256 scale = _mm256_div_ps(_mm256_set1_ps(1.0f), iscale);
  for (int i = 0; i < kSub; ++i)
    best_q[i] = codes_of(_mm256_mul_ps(iscale, _mm256_sub_ps(x[i], lo)), nmax_v);
  __m256 best = error_of(x, w, best_q, scale, lo);
  for (int step = 0; step <= 20; ++step) {
    const float stretch = -1.0f + 0.1f * float(step) + float(nmax);
    iscale = _mm256_div_ps(_mm256_set1_ps(stretch), _mm256_sub_ps(hi, lo));
    __m256 sum_l = zero, sum_l2 = zero, sum_xl = zero;
    for (int i = 0; i < kSub; ++i) {
      cand[i] = codes_of(_mm256_mul_ps(iscale, _mm256_sub_ps(x[i], lo)), nmax_v);
      const __m256 l = _mm256_cvtepi32_ps(cand[i]);
      const __m256 wl = _mm256_mul_ps(w[i], l);
      sum_l = _mm256_add_ps(sum_l, wl);
      sum_l2 = _mm256_add_ps(sum_l2, _mm256_mul_ps(wl, l));
      sum_xl = _mm256_add_ps(sum_xl, _mm256_mul_ps(wl, x[i]));
    }
    const __m256 det = _mm256_sub_ps(_mm256_mul_ps(sum_w, sum_l2), _mm256_mul_ps(sum_l, sum_l));
    const __m256 solvable = _mm256_cmp_ps(det, zero, _CMP_NLE_UQ);  // skipped where det <= 0
    __m256 this_scale = _mm256_div_ps(
        _mm256_sub_ps(_mm256_mul_ps(sum_w, sum_xl), _mm256_mul_ps(sum_x, sum_l)), det);
    __m256 this_min = _mm256_div_ps(
        _mm256_sub_ps(_mm256_mul_ps(sum_l2, sum_x), _mm256_mul_ps(sum_l, sum_xl)), det);
    // An offset above 0: refit the scale alone through the origin.
    const __m256 positive = _mm256_cmp_ps(this_min, zero, _CMP_GT_OQ);
    this_min = _mm256_blendv_ps(this_min, zero, positive);
    this_scale = _mm256_blendv_ps(this_scale, _mm256_div_ps(sum_xl, sum_l2), positive);
    const __m256 err = error_of(x, w, cand, this_scale, this_min);
    const __m256 better = _mm256_and_ps(solvable, _mm256_cmp_ps(err, best, _CMP_LT_OQ));
    if (_mm256_movemask_ps(better) == 0) continue;
    best = _mm256_blendv_ps(best, err, better);
    scale = _mm256_blendv_ps(scale, this_scale, better);
    lo = _mm256_blendv_ps(lo, this_min, better);
    const __m256i take = _mm256_castps_si256(better);
    for (int i = 0; i < kSub; ++i) best_q[i] = _mm256_blendv_epi8(best_q[i], cand[i], take);
  }

  scale = _mm256_blendv_ps(scale, zero, flat);
  const __m256 min = _mm256_xor_ps(_mm256_blendv_ps(lo, flat_lo, flat), sign);
  _mm256_storeu_ps(scales, scale);
  _mm256_storeu_ps(mins, min);
  const __m256i flat_i = _mm256_castps_si256(flat);
  alignas(32) int32_t lanes[8];
  for (int i = 0; i < kSub; ++i) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_andnot_si256(flat_i, best_q[i]));
    for (int j = 0; j < 8; ++j) codes[kSub * j + i] = uint8_t(lanes[j]);
  }
}

void fit_q6_k_scales_avx2(const float* xs, float* scales) {
  constexpr int kN = 16, kNmax = 32;  // fit_symmetric(16, 32, ...) per sub-block
  const __m256i lane_at = _mm256_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112);
  const __m256 zero = _mm256_setzero_ps(), sign = _mm256_set1_ps(-0.0f);
  const __m256i lo_code = _mm256_set1_epi32(-kNmax), hi_code = _mm256_set1_epi32(kNmax - 1);
  for (int half = 0; half < 2; ++half) {
    __m256 x[kN], w[kN];
    __m256 amax = zero, max = zero;  // the first element of largest |x|, in element order
    for (int i = 0; i < kN; ++i) {
      x[i] = _mm256_i32gather_ps(xs + 128 * half + i, lane_at, 4);
      w[i] = _mm256_mul_ps(x[i], x[i]);
      const __m256 a = _mm256_andnot_ps(sign, x[i]);
      const __m256 larger = _mm256_cmp_ps(a, amax, _CMP_GT_OQ);
      amax = _mm256_blendv_ps(amax, a, larger);
      max = _mm256_blendv_ps(max, x[i], larger);
    }
    __m256 best_scale = zero, best_score = _mm256_set1_ps(-1.0f);
    for (int step = 0; step <= 18; ++step) {
      const int s = step == 0 ? 0 : (step <= 9 ? -step : step - 9);  // 0, then -9..-1, 1..9
      const float stretch = -(float(kNmax) + 0.1f * float(s));
      const __m256 iscale = _mm256_div_ps(_mm256_set1_ps(stretch), max);
      __m256 sum_lx = zero, sum_l2 = zero;
      for (int i = 0; i < kN; ++i) {
        const __m256 r = _mm256_round_ps(_mm256_mul_ps(iscale, x[i]),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m256 l = _mm256_cvtepi32_ps(
            _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(r), lo_code), hi_code));
        sum_lx = _mm256_add_ps(sum_lx, _mm256_mul_ps(_mm256_mul_ps(w[i], x[i]), l));
        sum_l2 = _mm256_add_ps(sum_l2, _mm256_mul_ps(_mm256_mul_ps(w[i], l), l));
      }
      const __m256 solvable = _mm256_cmp_ps(sum_l2, zero, _CMP_NLE_UQ);  // skipped where <= 0
      const __m256 score = _mm256_div_ps(_mm256_mul_ps(sum_lx, sum_lx), sum_l2);
      const __m256 better = _mm256_and_ps(solvable, _mm256_cmp_ps(score, best_score, _CMP_GT_OQ));
      best_score = _mm256_blendv_ps(best_score, score, better);
      best_scale = _mm256_blendv_ps(best_scale, _mm256_div_ps(sum_lx, sum_l2), better);
    }
    const __m256 tiny = _mm256_cmp_ps(amax, _mm256_set1_ps(1e-15f), _CMP_LT_OQ);
    _mm256_storeu_ps(scales + 8 * half, _mm256_blendv_ps(best_scale, zero, tiny));
  }
}

}  // namespace fak::quant
