#include "backend/cpu/blas_threads.h"

#include <dlfcn.h>

#include <mutex>

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

std::mutex serial_mutex;
int serial_depth = 0;  // live SerialBlasScopes
int serial_saved = 0;  // the thread count the first one found

}  // namespace

int blasThreads() {
  return openBlas().get ? openBlas().get() : 0;
}

void setBlasThreads(int threads) {
  if (threads > 0 && openBlas().set && openBlas().get && openBlas().get() != threads) openBlas().set(threads);
}

SerialBlasScope::SerialBlasScope() {
  std::lock_guard lock(serial_mutex);
  if (serial_depth++ == 0) {
    serial_saved = blasThreads();
    setBlasThreads(1);
  }
}

SerialBlasScope::~SerialBlasScope() {
  std::lock_guard lock(serial_mutex);
  if (--serial_depth == 0) setBlasThreads(serial_saved);
}

}  // namespace kiln
