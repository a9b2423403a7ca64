#include "backend/cpu/blas_threads.h"

#include <dlfcn.h>

namespace kiln {
namespace {

// Looked up at run time, so that any CBLAS links (only OpenBLAS has a pool).
struct OpenBlasThreads {
  using Get = int (*)();
  using Set = void (*)(int);
  Get get = reinterpret_cast<Get>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  Set set = reinterpret_cast<Set>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
};

const OpenBlasThreads& openBlas() {
  static const OpenBlasThreads api;
  return api;
}

}  // namespace

int blasThreads() {
  return openBlas().get ? openBlas().get() : 0;
}

void setBlasThreads(int threads) {
  if (threads > 0 && openBlas().set && openBlas().get && openBlas().get() != threads) openBlas().set(threads);
}

}  // namespace kiln
