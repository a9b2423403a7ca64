#include "backend/cpu/dnnl_common.h"

#include <cpuid.h>

#include <cstdlib>
#include <new>

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

}  // namespace kiln::cpu

namespace kiln::cpu {

void* dnnlScratch(size_t bytes) {
  struct Buffer {
    void* p = nullptr;
    size_t size = 0;
    ~Buffer() { std::free(p); }
  };
  thread_local Buffer buf;
  if (bytes > buf.size) {
    std::free(buf.p);
    buf.size = (bytes + 63) / 64 * 64;
    buf.p = std::aligned_alloc(64, buf.size);
    if (!buf.p) throw std::bad_alloc();
  }
  return buf.p;
}

void dnnlExecute(const dnnl::primitive& prim, const dnnl::memory::desc& scratch,
                 std::unordered_map<int, dnnl::memory> args) {
  auto& eng = dnnlEngine();
  dnnl::stream s(eng);
  args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(scratch, eng, dnnlScratch(scratch.get_size())));
  prim.execute(s, args);
  s.wait();
}

}  // namespace kiln::cpu
