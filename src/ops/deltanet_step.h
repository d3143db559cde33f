// The delta rule's recurrent step for one value head, the part of Gated DeltaNet that carries state
// from token to token (ops/deltanet.h computes its inputs). Every token of every call runs this
// same step, so a state depends on its tokens only, never on how they were grouped into calls.
//
// For each token t, over the head's memory S [dk][dv]:
//   S    = e^g_t S                      (decay)
//   kv   = S^T k_t                      (what the memory predicts for k_t)
//   S   += k_t (beta_t (v_t - kv))^T    (the delta update)
//   o_t  = S^T q_t
//
// note: every column d of S evolves on its own (k, q, beta and the decay are shared; v, kv, the
// delta and o are per column), and each element's operations are fixed: row = fma(k, delta, row),
// o = fma(q, row, o), row *= decay, kv = fma(k, row, kv), accumulated over rows kk = 0..dk-1 in
// order. So the kernels vectorise across columns and tile them in strips (a strip of S stays in L1
// across the tokens of a call) and still give the scalar reference's bits on every ISA.
#pragma once

#include <cstddef>

namespace fak {

// One head's rows over n tokens: token i's q, k, v at q/k/v + i * qkv_stride (q already scaled and
// both L2-normalised), its beta and log decay g at beta/g + i * gb_stride, its output o at
// out + i * out_stride.
struct DeltaHeadRows {
  const float *q, *k, *v;
  size_t qkv_stride;
  const float *beta, *g;
  size_t gb_stride;
  float* out;
  size_t out_stride;
};

// Advances S [dk][dv] over n tokens in place and writes their outputs.
using DeltaStepFn = void (*)(float* S, int dk, int dv, const DeltaHeadRows& r, int n);

// The kernel for this CPU (AVX-512, AVX2 or the scalar reference; the same bits), chosen once.
DeltaStepFn delta_step_kernel();
// The scalar reference, and the vector kernels (call one only on a CPU that has its ISA).
void delta_step_ref(float* S, int dk, int dv, const DeltaHeadRows& r, int n);
// The reference over columns [c0, c1) only: the vector kernels' tail.
void delta_step_columns(float* S, int dk, int dv, const DeltaHeadRows& r, int n, int c0, int c1);
DeltaStepFn delta_step_avx2();
DeltaStepFn delta_step_avx512();

}  // namespace fak
