// What the CPU can run, read once. Kernel families are chosen from this at start-up, never per
// call.
#pragma once

namespace fak {

struct CpuFeatures {
  bool avx2 = false;    // AVX2 + FMA + F16C (the "avx2" kernel family needs all three)
  bool avx512 = false;  // F, BW, DQ, VL
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  // AVX512-BF16 whose vdpbf16ps does at least the f32 FMA's multiply-adds a cycle (32 products an
  // instruction against 16): AMD's Zen 4 and Zen 5. Intel's cores issue it at a quarter of the
  // FMA's rate, half its multiply-adds (a Sapphire Rapids-class Xeon, one core: 1.28 G vdpbf16ps a
  // second against 5.28 G vfmadd231ps), so there widening bf16 weights to f32 multiplies faster.
  bool bf16_dot_full_rate = false;
  // AMX-TILE + AMX-INT8, with the OS saving tile state and this process granted its use
  // (Linux's arch_prctl(ARCH_REQ_XCOMP_PERM)): Sapphire Rapids and later Xeons.
  bool amx_int8 = false;
  // AMX-BF16 beside AMX-INT8 (the same OS and process checks): the attention tiles.
  bool amx_bf16 = false;
};

const CpuFeatures& cpu_features();

}  // namespace fak
