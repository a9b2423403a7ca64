// Happens-before edges ThreadSanitizer cannot see by itself. OpenMP's
// runtime (libgomp) is not built with TSan, so the fork and join of a
// parallel region are invisible to it and every read after the join of what
// a worker wrote would be reported as a race. Code that hands data to pool
// threads marks the hand-over: kilnTsanRelease(&x) before (fork, end of a
// worker's part) and kilnTsanAcquire(&x) after (start of a worker's part,
// join). Both compile to nothing without TSan.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define KILN_HAS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KILN_HAS_TSAN 1
#endif
#endif

#ifdef KILN_HAS_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
// The address only names the hand-over; nothing is read or written there.
inline void kilnTsanAcquire(const void* addr) {
  __tsan_acquire(const_cast<void*>(addr));
}
inline void kilnTsanRelease(const void* addr) {
  __tsan_release(const_cast<void*>(addr));
}
#else
inline void kilnTsanAcquire(const void*) {}
inline void kilnTsanRelease(const void*) {}
#endif
