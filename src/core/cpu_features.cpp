#include "core/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace fak {

namespace {

// AMX needs three yeses: the CPU (CPUID 7.0 EDX: AMX-TILE bit 24, AMX-INT8 bit 25), the OS saving
// the tile state (XCR0 bits 17 and 18), and, on Linux, this process asking for that state once
// (ARCH_REQ_XCOMP_PERM for XTILEDATA, feature 18), or the first tile instruction raises SIGILL.
bool detect_amx_int8() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  if ((edx & (1u << 24)) == 0 || (edx & (1u << 25)) == 0) return false;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || (ecx & (1u << 27)) == 0) return false;  // OSXSAVE
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & (3u << 17)) != (3u << 17)) return false;
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

// The vendor string of CPUID leaf 0: AMD's, or Hygon's (Zen cores under another name).
bool amd_core() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  return std::strcmp(vendor, "AuthenticAMD") == 0 || std::strcmp(vendor, "HygonGenuine") == 0;
}

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
  bool vbmi = false;
  if (f.avx512 && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    f.avx512_vnni = (ecx & (1u << 11)) != 0;
    vbmi = (ecx & (1u << 1)) != 0;
    if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) f.avx512_bf16 = (eax & (1u << 5)) != 0;
  }
  f.bf16_dot_full_rate = f.avx512_bf16 && amd_core();
  // The K-quant AMX tiles make their planes with VBMI's byte permutes (ops/quant): every CPU with
  // AMX has VBMI, but a VM could show one without the other.
  f.amx_int8 = f.avx512_vnni && vbmi && detect_amx_int8();
  // CPUID 7.0 EDX bit 22: AMX-BF16 (the tile state was granted with AMX-INT8's checks above).
  f.amx_bf16 = f.amx_int8 && f.avx512_bf16 && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) &&
               (edx & (1u << 22)) != 0;
  // FAK_ISA=avx512, avx2 or scalar caps the kernel families (to compare them on one machine);
  // outputs of the amx, avx512 and avx2 families are the same bits, scalar ones differ in
  // summation order; attention on AMX-BF16 differs from the others within rounding
  // (ops/attention_kernels.h).
  if (const char* cap = std::getenv("FAK_ISA")) {
    f.amx_int8 = f.amx_bf16 = false;
    if (std::strcmp(cap, "avx2") == 0 || std::strcmp(cap, "scalar") == 0)
      f.avx512 = f.avx512_vnni = f.avx512_bf16 = f.bf16_dot_full_rate = false;
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
