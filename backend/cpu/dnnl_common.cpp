#include "backend/cpu/dnnl_common.h"

#include <cstdlib>
#include <new>

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
