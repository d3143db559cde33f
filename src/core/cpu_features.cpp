#include "core/cpu_features.h"

#include <cpuid.h>

#include <cstdlib>
#include <cstring>

namespace fak {

namespace {

// note: clang's __builtin_cpu_supports does not know "f16c", so feature bits are read with cpuid
// directly; __builtin_cpu_supports("avx2") also covers the OS saving YMM state.
CpuFeatures detect() {
  CpuFeatures f;
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  if (f.avx512 && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    f.avx512_vnni = (ecx & (1u << 11)) != 0;
    if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) f.avx512_bf16 = (eax & (1u << 5)) != 0;
  }
  // FAK_ISA=avx2 or scalar caps the kernel families (to compare them on one machine); outputs of
  // the avx512 and avx2 families are the same bits, scalar ones differ in summation order.
  if (const char* cap = std::getenv("FAK_ISA")) {
    if (std::strcmp(cap, "avx2") == 0 || std::strcmp(cap, "scalar") == 0)
      f.avx512 = f.avx512_vnni = f.avx512_bf16 = false;
    if (std::strcmp(cap, "scalar") == 0) f.avx2 = false;
  }
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

}  // namespace fak
