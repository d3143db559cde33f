// Element-wise and per-row ops of the forward pass. Free functions over plain pointers with
// explicit sizes. Most are cheap next to matmul and attention and stay scalar and readable; the
// SiLU of the MLP (T x hidden exps) is vectorised and threaded (ops/gated_activation.cpp).
#pragma once

#include <cstdint>

namespace fak {

// out = x / sqrt(mean(x^2) + eps) * (weight or 1 + weight). Sum of squares in double: the HF
// reference runs in float64 and this is where f32 loses most.
void rmsnorm(const float* x, const float* weight, int n, float eps, float* out);

// RoPE in the HF "rotate_half" layout: dims [0, rot/2) pair with [rot/2, rot). cos/sin have rot/2
// entries. Dims from rot to head_dim are left alone (partial rotary).
void rope_apply(float* head, int rot, const float* cos, const float* sin);

// out = silu(gate) * up, with exp_poly (ops/vec.h): the same bits on every ISA and thread count.
void silu_mul(const float* gate, const float* up, int n, float* out);
// out = gelu_tanh(gate) * up: GeGLU with PyTorch's tanh approximation (ops/gated_activation.cpp).
void gelu_tanh_mul(const float* gate, const float* up, int n, float* out);
// x *= sigmoid(gate), with exp_poly: the gated attention's output gate (Qwen3.5).
void sigmoid_mul(float* x, const float* gate, int n);
// out = (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha g), g = min(gate, limit): gpt-oss's
// experts (ops/gated_activation.cpp).
void clamped_swiglu_mul(const float* gate, const float* up, int n, float alpha, float limit,
                        float* out);
void add_inplace(float* x, const float* y, int n);
void softmax_inplace(float* x, int n);

}  // namespace fak
