#include "backend/cpu/cpu_features.h"

#include <cpuid.h>

namespace kiln::cpu {

bool cpuHasNativeBf16() {
  static const bool native = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_max(0, nullptr) < 7) return false;
    __cpuid_count(7, 0, a, b, c, d);
    const bool amx_bf16 = (d >> 22) & 1u;
    const bool avx512f = (b >> 16) & 1u;
    __cpuid_count(7, 1, a, b, c, d);
    const bool avx512_bf16 = (a >> 5) & 1u;
    return amx_bf16 || (avx512f && avx512_bf16);
  }();
  return native;
}

bool cpuHasAvx512() {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512;
}

}  // namespace kiln::cpu
