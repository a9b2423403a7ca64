// Counting malloc for the kiln executable (see heap_meter.h). Defining
// malloc/free here overrides glibc's for the whole process, libraries
// included; the real work is glibc's own (__libc_malloc ...), so behaviour is
// unchanged and the cost is two relaxed atomic operations per call.
#include "cli/heap_meter.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KILN_HEAP_METER 0
#else
#define KILN_HEAP_METER 1
#endif

#if KILN_HEAP_METER
#include <malloc.h>

#include <atomic>
#include <cerrno>
#include <cstddef>

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void __libc_free(void*);
}

namespace {

// Constant-initialized: malloc may run before any constructor.
std::atomic<int64_t> g_in_use{0};
std::atomic<int64_t> g_peak{0};

void noteAlloc(void* p) {
  if (!p) return;
  const int64_t n = static_cast<int64_t>(malloc_usable_size(p));
  const int64_t now = g_in_use.fetch_add(n, std::memory_order_relaxed) + n;
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void noteFree(void* p) {
  if (p) g_in_use.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
}

}  // namespace

extern "C" {

void* malloc(size_t n) {
  void* p = __libc_malloc(n);
  noteAlloc(p);
  return p;
}

void free(void* p) {
  noteFree(p);
  __libc_free(p);
}

void* calloc(size_t n, size_t size) {
  void* p = __libc_calloc(n, size);
  noteAlloc(p);
  return p;
}

void* realloc(void* old, size_t n) {
  noteFree(old);
  void* p = __libc_realloc(old, n);
  // A failed realloc keeps the old block.
  noteAlloc(p ? p : (n ? old : nullptr));
  return p;
}

void* memalign(size_t align, size_t n) {
  void* p = __libc_memalign(align, n);
  noteAlloc(p);
  return p;
}

void* aligned_alloc(size_t align, size_t n) { return memalign(align, n); }

int posix_memalign(void** out, size_t align, size_t n) {
  if (align < sizeof(void*) || (align & (align - 1)) != 0) return EINVAL;
  void* p = memalign(align, n);
  if (!p && n) return ENOMEM;
  *out = p;
  return 0;
}

void* valloc(size_t n) { return memalign(4096, n); }

}  // extern "C"
#endif

namespace kiln::cli {

#if KILN_HEAP_METER
bool heapMeterAvailable() { return true; }
int64_t heapInUse() { return g_in_use.load(std::memory_order_relaxed); }
int64_t heapPeak() { return g_peak.load(std::memory_order_relaxed); }
void resetHeapPeak() { g_peak.store(g_in_use.load(std::memory_order_relaxed), std::memory_order_relaxed); }
#else
bool heapMeterAvailable() { return false; }
int64_t heapInUse() { return 0; }
int64_t heapPeak() { return 0; }
void resetHeapPeak() {}
#endif

}  // namespace kiln::cli
