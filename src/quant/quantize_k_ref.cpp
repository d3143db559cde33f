// Scalar quantize / dequantize of the K-quants (q4_K, q5_K, q6_K). Each super-block of 256 holds
// sub-block scales (and mins) that are themselves quantized against one fp16 super-scale, so the
// quantizer works in two passes: fit a float scale (and min) per sub-block by a small search over
// candidate scales with a least-squares refit, then quantize those scales to 6 or 8 bits and
// requantize the values against the scales actually stored.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "quant/kernels_internal.h"
#include "quant/quant_blocks.h"

namespace fak::quant {

namespace {

// Ties to even, as nearbyint in the default FP mode; rint rounds the same way (it may also raise
// the inexact flag, which nothing reads) and compiles inline, where nearbyint is a libm call per
// value (a tenth of a K-quant conversion).
inline int nearest(float v) {
  return int(std::rint(v));
}

// Fits x[l] ≈ scale * L[l] - min with L in [0, nmax] and min >= 0, minimising Σ w (error)². Tries
// the plain range mapping and 20 slightly stretched ones; for each candidate L the best (scale,
// min) is the weighted least-squares solution, with min clipped to >= 0 (the formats store
// non-negative mins). Returns scale; *min_out gets min.
float fit_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out) {
  float lo = x[0], hi = x[0];
  float sum_w = w[0], sum_x = w[0] * x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0) lo = 0;  // min is stored >= 0 as an offset below zero; a positive block uses 0
  if (hi <= lo) {
    std::fill(L, L + n, uint8_t(0));
    *min_out = -lo;
    return 0.0f;
  }
  auto error_of = [&](float scale, float offset, const uint8_t* q) {
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = scale * q[i] + offset - x[i];
      err += w[i] * diff * diff;
    }
    return err;
  };
  float iscale = nmax / (hi - lo);
  float scale = 1 / iscale;
  for (int i = 0; i < n; ++i) L[i] = uint8_t(std::clamp(nearest(iscale * (x[i] - lo)), 0, nmax));
  float best = error_of(scale, lo, L);
  uint8_t cand[kQK];
  for (int step = 0; step <= 20; ++step) {
    iscale = (-1.0f + 0.1f * step + nmax) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest(iscale * (x[i] - lo)), 0, nmax);
      cand[i] = uint8_t(l);
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det <= 0) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {  // offset must be <= 0: refit the scale alone through the origin
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    const float err = error_of(this_scale, this_min, cand);
    if (err < best) {
      best = err;
      scale = this_scale;
      lo = this_min;
      std::copy(cand, cand + n, L);
    }
  }
  *min_out = -lo;
  return scale;
}

// Fits x[l] ≈ scale * L[l] with L in [-nmax, nmax - 1], weighting by x² so large values (which
// dominate a dot product) are kept accurate. The largest-magnitude element maps to -nmax, using the
// extra negative level; then 18 nearby scales are tried and the one with the best least-squares fit
// (max (Σ w x l)² / Σ w l²) is kept. Returns scale with L biased to [0, 2 nmax).
float fit_symmetric(int n, int nmax, const float* x, int8_t* L) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < 1e-15f) {
    std::fill(L, L + n, int8_t(0));
    return 0.0f;
  }
  float best_scale = 0, best_score = -1;
  int8_t cand[kQKK / 16];
  for (int step = 0; step <= 18; ++step) {
    const int s = step == 0 ? 0 : (step <= 9 ? -step : step - 9);  // 0 first, then -9..-1, 1..9
    const float iscale = -(nmax + 0.1f * s) / max;
    float sum_lx = 0, sum_l2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest(iscale * x[i]), -nmax, nmax - 1);
      cand[i] = int8_t(l);
      const float w = x[i] * x[i];
      sum_lx += w * x[i] * l;
      sum_l2 += w * l * l;
    }
    if (sum_l2 <= 0) continue;
    const float score = sum_lx * sum_lx / sum_l2;
    if (score > best_score) {
      best_score = score;
      best_scale = sum_lx / sum_l2;
      std::copy(cand, cand + n, L);
    }
  }
  return best_scale;
}

// Quantizes the 8 sub-block (scale, min) pairs of a q4_K/q5_K super-block to 6 bits each against
// two fp16 super-scales, packs them, and returns the dequantized values actually stored.
void pack_scales_k4(const float* scales, const float* mins, uint16_t* d_out, uint16_t* dmin_out,
                    uint8_t* packed, float* eff_scale, float* eff_min) {
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  std::memset(packed, 0, kKScaleSize);
  for (int j = 0; j < 8; ++j) {
    const int ls = std::clamp(nearest(inv_scale * scales[j]), 0, 63);
    const int lm = std::clamp(nearest(inv_min * mins[j]), 0, 63);
    if (j < 4) {
      packed[j] = uint8_t(ls);
      packed[j + 4] = uint8_t(lm);
    } else {
      packed[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
      packed[j - 4] |= uint8_t((ls >> 4) << 6);
      packed[j] |= uint8_t((lm >> 4) << 6);
    }
  }
  *d_out = f32_to_f16(max_scale / 63.0f);
  *dmin_out = f32_to_f16(max_min / 63.0f);
  const float d = f16_to_f32(*d_out), dmin = f16_to_f32(*dmin_out);
  uint8_t sc[8], m[8];
  unpack_scales_k4(packed, sc, m);
  for (int j = 0; j < 8; ++j) {
    eff_scale[j] = d * sc[j];
    eff_min[j] = dmin * m[j];
  }
}

void requantize_k4(const float* x, int nmax, const float* eff_scale, const float* eff_min,
                   uint8_t* L) {
  for (int j = 0; j < 8; ++j) {
    for (int l = 0; l < 32; ++l) {
      const int i = 32 * j + l;
      L[i] = eff_scale[j] == 0.0f
                 ? 0
                 : uint8_t(std::clamp(nearest((x[i] + eff_min[j]) / eff_scale[j]), 0, nmax));
    }
  }
}

}  // namespace

// Sub-block (scale, min) fits for one q4_K/q5_K super-block; weights favour large values (RMS of
// the sub-block plus |x|), as the error of big activations-times-weights matters most. The AVX2
// variant (quantize_k_avx2.cpp) runs the 8 sub-blocks in 8 lanes and gives the same bits.
void fit_k4_super_block_ref(const float* x, int nmax, uint8_t* L, float* scales, float* mins) {
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av = std::sqrt(sum_x2 / 32);
    float w[32];
    for (int l = 0; l < 32; ++l) w[l] = av + std::fabs(xs[l]);
    scales[j] = fit_scale_min(32, nmax, xs, w, L + 32 * j, &mins[j]);
  }
}

void quantize_q4_k(const float* x, void* vy, int64_t n, FitK4Fn fit) {
  auto* y = static_cast<BlockQ4K*>(vy);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    uint8_t L[kQKK];
    float scales[8], mins[8], eff_scale[8], eff_min[8];
    BlockQ4K b;
    fit(x, 15, L, scales, mins);
    uint16_t d = 0, dmin = 0;  // b is packed: no pointers into it
    pack_scales_k4(scales, mins, &d, &dmin, b.scales, eff_scale, eff_min);
    b.d = d;
    b.dmin = dmin;
    requantize_k4(x, 15, eff_scale, eff_min, L);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l)
        b.qs[32 * c + l] = uint8_t(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    std::memcpy(&y[i], &b, sizeof b);
  }
}

void quantize_q5_k(const float* x, void* vy, int64_t n, FitK4Fn fit) {
  auto* y = static_cast<BlockQ5K*>(vy);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    uint8_t L[kQKK];
    float scales[8], mins[8], eff_scale[8], eff_min[8];
    BlockQ5K b;
    fit(x, 31, L, scales, mins);
    uint16_t d = 0, dmin = 0;  // b is packed: no pointers into it
    pack_scales_k4(scales, mins, &d, &dmin, b.scales, eff_scale, eff_min);
    b.d = d;
    b.dmin = dmin;
    requantize_k4(x, 31, eff_scale, eff_min, L);
    std::memset(b.qh, 0, sizeof b.qh);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
        b.qs[32 * c + l] = uint8_t((lo & 0xF) | ((hi & 0xF) << 4));
        b.qh[l] |= uint8_t(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
    std::memcpy(&y[i], &b, sizeof b);
  }
}

void quantize_q4_k_ref(const float* x, void* y, int64_t n) {
  quantize_q4_k(x, y, n, fit_k4_super_block_ref);
}

void quantize_q5_k_ref(const float* x, void* y, int64_t n) {
  quantize_q5_k(x, y, n, fit_k4_super_block_ref);
}

// The 16 sub-block scales of a q6_K super-block (their codes are made again against the stored
// scales, so the fit's own are dropped). The AVX2 variant (quantize_k_avx2.cpp) gives the same
// bits.
void fit_q6_k_scales_ref(const float* x, float* scales) {
  int8_t L[16];
  for (int k = 0; k < 16; ++k) scales[k] = fit_symmetric(16, 32, x + 16 * k, L);
}

void quantize_q6_k_ref(const float* x, void* y, int64_t n) {
  quantize_q6_k(x, y, n, fit_q6_k_scales_ref);
}

void quantize_q6_k(const float* x, void* vy, int64_t n, FitQ6KFn fit) {
  auto* y = static_cast<BlockQ6K*>(vy);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    int8_t L[kQKK];
    float scales[16];
    float max_scale = 0, amax = 0;
    fit(x, scales);
    for (int k = 0; k < 16; ++k) {
      if (std::fabs(scales[k]) > amax) {
        amax = std::fabs(scales[k]);
        max_scale = scales[k];
      }
    }
    BlockQ6K b;
    std::memset(&b, 0, sizeof b);
    if (amax >= 1e-15f) {
      // The largest scale maps to -128 so the signed 8-bit range is used fully.
      const float iscale = -128.0f / max_scale;
      b.d = f32_to_f16(1 / iscale);
      for (int k = 0; k < 16; ++k) b.scales[k] = int8_t(std::min(127, nearest(iscale * scales[k])));
      const float d = f16_to_f32(b.d);
      for (int k = 0; k < 16; ++k) {
        const float dd = d * b.scales[k];
        for (int l = 0; l < 16; ++l) {
          const int idx = 16 * k + l;
          L[idx] = dd == 0.0f ? 0 : int8_t(std::clamp(nearest(x[idx] / dd), -32, 31));
        }
      }
      for (int h = 0; h < 2; ++h) {
        for (int l = 0; l < 32; ++l) {
          const int q1 = L[128 * h + l] + 32, q2 = L[128 * h + l + 32] + 32;
          const int q3 = L[128 * h + l + 64] + 32, q4 = L[128 * h + l + 96] + 32;
          b.ql[64 * h + l] = uint8_t((q1 & 0xF) | ((q3 & 0xF) << 4));
          b.ql[64 * h + l + 32] = uint8_t((q2 & 0xF) | ((q4 & 0xF) << 4));
          b.qh[32 * h + l] =
              uint8_t((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
        }
      }
    } else {
      // All-zero block: d = 0 and every code the zero level (32), so it dequantizes to exact 0s.
      std::memset(b.ql, 0, sizeof b.ql);
      std::memset(b.qh, 0xAA, sizeof b.qh);  // high bits "10" = 32 in every 2-bit field
    }
    std::memcpy(&y[i], &b, sizeof b);
  }
}

void dequantize_q4_k_ref(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4K*>(vx);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = f16_to_f32(x[i].d), dmin = f16_to_f32(x[i].dmin);
    uint8_t sc[8], m[8];
    unpack_scales_k4(x[i].scales, sc, m);
    for (int c = 0; c < 4; ++c) {
      const float d1 = d * sc[2 * c], m1 = dmin * m[2 * c];
      const float d2 = d * sc[2 * c + 1], m2 = dmin * m[2 * c + 1];
      for (int l = 0; l < 32; ++l) *y++ = d1 * (x[i].qs[32 * c + l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (x[i].qs[32 * c + l] >> 4) - m2;
    }
  }
}

void dequantize_q5_k_ref(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5K*>(vx);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = f16_to_f32(x[i].d), dmin = f16_to_f32(x[i].dmin);
    uint8_t sc[8], m[8];
    unpack_scales_k4(x[i].scales, sc, m);
    for (int c = 0; c < 4; ++c) {
      const float d1 = d * sc[2 * c], m1 = dmin * m[2 * c];
      const float d2 = d * sc[2 * c + 1], m2 = dmin * m[2 * c + 1];
      for (int l = 0; l < 32; ++l) {
        const int q = (x[i].qs[32 * c + l] & 0xF) | (((x[i].qh[l] >> (2 * c)) & 1) << 4);
        *y++ = d1 * q - m1;
      }
      for (int l = 0; l < 32; ++l) {
        const int q = (x[i].qs[32 * c + l] >> 4) | (((x[i].qh[l] >> (2 * c + 1)) & 1) << 4);
        *y++ = d2 * q - m2;
      }
    }
  }
}

void dequantize_q6_k_ref(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ6K*>(vx);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = x[i].ql + 64 * h;
      const uint8_t* qh = x[i].qh + 32 * h;
      const int8_t* sc = x[i].scales + 8 * h;
      for (int l = 0; l < 32; ++l) {
        const int k = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[k] * q1;
        y[l + 32] = d * sc[k + 2] * q2;
        y[l + 64] = d * sc[k + 4] * q3;
        y[l + 96] = d * sc[k + 6] * q4;
      }
      y += 128;
    }
  }
}

}  // namespace fak::quant
