#include "backend/cpu/dnnl_common.h"

#include <cstdlib>
#include <new>

namespace kiln::cpu {

DnnlWorkspace::DnnlWorkspace(std::initializer_list<size_t> sizes) {
  struct Buffer {
    void* p = nullptr;
    size_t size = 0;
    ~Buffer() { std::free(p); }
  };
  thread_local Buffer buf;
  size_t total = 0;
  for (size_t s : sizes) {
    offsets_.push_back(total);
    total += (s + 63) / 64 * 64;
  }
  if (total > buf.size) {
    std::free(buf.p);
    buf.p = std::aligned_alloc(64, total);
    buf.size = buf.p ? total : 0;
    if (!buf.p) throw std::bad_alloc();
  }
  base_ = static_cast<char*>(buf.p);
}

}  // namespace kiln::cpu
