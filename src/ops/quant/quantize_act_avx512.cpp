// The activations of a quantised matmul: Q8_0 sixteen blocks at a time, with the two things the
// prefill kernels read beside the blocks (each block's fp16 scale widened, and the sum of its
// quants) made in the same pass; and Q8_K (the K-quants' activations) a super-block at a time.
//
// The AVX2 quantiser (quant/quantize_avx2.cpp) goes a block at a time: a horizontal max, two
// scalar divisions and a scalar fp16 rounding per block, then prepare_quant widened the scales and
// summed the quants in two more passes. That was 5% of a MoE prefill (each token's row is
// quantised once for each of its experts). Here the 16 blocks' maxima, and later their sums, are
// gathered into one register by a tree of shuffles, so the divisions and the fp16 rounding are one
// instruction for 16 blocks.
//
// note: the same bytes as quantize_q8_0_ref / quantize_q8_k_ref (for finite inputs). The max and
// the integer sums are exact in any order; d = amax / 127 and 1 / d are IEEE divisions either way;
// vcvtps2ph rounds to nearest even as f32_to_f16 does (subnormal and infinite halves included); q =
// rint(x * id) is vcvtps2dq under the default rounding mode after x * id is clamped to [-127, 127]
// with NaN taken as 0, as round_q8 does (|x * id| <= 127 but where amax is under ~3.7e-37: 1 / d
// is then infinite).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/avx512_warnings.h"
#include "ops/matmul_kernels.h"
#include "quant/quant_blocks.h"

namespace fak::kernels {

namespace {

// Lane b of the result: op over the 16 lanes of v[b] (b < 16). Four levels of 128-bit, then 64-
// and 32-bit shuffles pair the vectors up; the last permute puts block b in lane b.
template <class Op>
[[gnu::always_inline]] inline __m512i reduce16(__m512i v[16], Op op) {
  __m512i u[8], w[4], z[2];
  for (int i = 0; i < 8; ++i)  // u[i]: 128-bit lanes 0-1 partials of v[2i], 2-3 of v[2i + 1]
    u[i] = op(_mm512_shuffle_i32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
              _mm512_shuffle_i32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int i = 0; i < 4; ++i)  // w[i]: 128-bit lane l holds v[4i + l]'s partial
    w[i] = op(_mm512_shuffle_i32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
              _mm512_shuffle_i32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  for (int i = 0; i < 2; ++i) {  // z[i]: lane l, pairs of v[8i + l] then of v[8i + 4 + l]
    const __m512 a = _mm512_castsi512_ps(w[2 * i]), b = _mm512_castsi512_ps(w[2 * i + 1]);
    z[i] = op(_mm512_castps_si512(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0))),
              _mm512_castps_si512(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2))));
  }
  const __m512 a = _mm512_castsi512_ps(z[0]), b = _mm512_castsi512_ps(z[1]);
  // Lane 4l + m now holds v[l + 4m].
  const __m512i r = op(_mm512_castps_si512(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))),
                       _mm512_castps_si512(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_epi32(order, r);
}

// rint(v * id), clamped to [-127, 127], NaN (0 * an infinite id) as 0: round_q8's rule.
[[gnu::always_inline]] inline __m512i quant16(__m512 v, __m512 id) {
  __m512 q = _mm512_mul_ps(v, id);
  q = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(q, q, _CMP_ORD_Q), q);
  q = _mm512_min_ps(_mm512_max_ps(q, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
  return _mm512_cvtps_epi32(q);
}

// Blocks [0, count) (count <= 16) of x into out, their widened scales and quant sums.
void quantize_group(const float* x, int count, quant::BlockQ8_0* out, float* scales,
                    int32_t* sums) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  __m512 xs[16][2];
  __m512i m[16];
  for (int b = 0; b < 16; ++b) {
    if (b < count) {
      xs[b][0] = _mm512_loadu_ps(x + 32 * b);
      xs[b][1] = _mm512_loadu_ps(x + 32 * b + 16);
    } else {
      xs[b][0] = xs[b][1] = _mm512_setzero_ps();
    }
    m[b] = _mm512_castps_si512(
        _mm512_max_ps(_mm512_andnot_ps(sign, xs[b][0]), _mm512_andnot_ps(sign, xs[b][1])));
  }
  // Non-negative floats order as their bit patterns do, so the integer max is the float max.
  const __m512 amax =
      _mm512_castsi512_ps(reduce16(m, [](__m512i a, __m512i b) { return _mm512_max_epi32(a, b); }));
  const __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
  const __m512 id = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_OQ),
                                        _mm512_set1_ps(1.0f), d);
  const __m256i dh = _mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  alignas(64) uint16_t dhs[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(dhs), dh);
  const __mmask16 valid = __mmask16((1u << count) - 1);
  _mm512_mask_storeu_ps(scales, valid, _mm512_cvtph_ps(dh));
  __m512i s[16];
  for (int b = 0; b < 16; ++b) {
    const __m512 idb = _mm512_permutexvar_ps(_mm512_set1_epi32(b), id);
    const __m512i q0 = quant16(xs[b][0], idb), q1 = quant16(xs[b][1], idb);
    s[b] = _mm512_add_epi32(q0, q1);
    if (b < count) {
      std::memcpy(&out[b].d, &dhs[b], 2);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].qs), _mm512_cvtepi32_epi8(q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].qs + 16), _mm512_cvtepi32_epi8(q1));
    }
  }
  _mm512_mask_storeu_epi32(
      sums, valid, reduce16(s, [](__m512i a, __m512i b) { return _mm512_add_epi32(a, b); }));
}

}  // namespace

void quantize_q8_k_act_avx512(const float* x, int64_t cols, uint8_t* act) {
  auto* out = reinterpret_cast<quant::BlockQ8K*>(act);
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t i = 0; i < cols / 256; ++i, x += 256) {
    __m512 xs[16];
    __m512 m = _mm512_setzero_ps();
    for (int g = 0; g < 16; ++g) {
      xs[g] = _mm512_loadu_ps(x + 16 * g);
      m = _mm512_max_ps(m, _mm512_andnot_ps(sign, xs[g]));
    }
    const float amax = _mm512_reduce_max_ps(m);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    std::memcpy(&out[i].d, &d, 4);
    const __m512 vid = _mm512_set1_ps(id);
    __m512i q[16];
    for (int g = 0; g < 16; ++g) {
      q[g] = quant16(xs[g], vid);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out[i].qs + 16 * g), _mm512_cvtepi32_epi8(q[g]));
    }
    // bsums[g]: the sum of quants 16 g .. 16 g + 15, exact as int16 (|sum| <= 16 * 127).
    const __m512i sums = reduce16(q, [](__m512i a, __m512i b) { return _mm512_add_epi32(a, b); });
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[i].bsums), _mm512_cvtepi32_epi16(sums));
    // sums32[k] = bsums[2k] + bsums[2k + 1]: adjacent lanes added (|sum| <= 32 * 127).
    const __m512i pairs = _mm512_add_epi32(sums, _mm512_srli_epi64(sums, 32));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[i].sums32), _mm512_cvtepi64_epi16(pairs));
  }
}

void quantize_q8_0_act_avx512(const float* x, int64_t cols, uint8_t* act, float* scales,
                              int32_t* sums) {
  auto* out = reinterpret_cast<quant::BlockQ8_0*>(act);
  const int64_t nb = cols / 32;
  for (int64_t b = 0; b < nb; b += 16) {
    const int count = int(nb - b < 16 ? nb - b : 16);
    quantize_group(x + 32 * b, count, out + b, scales + b, sums + b);
  }
}

}  // namespace fak::kernels
