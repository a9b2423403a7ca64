#include "core/buffer_pool.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace kiln {
namespace {

/// Idle blocks by exact size. Leaked on purpose: tensors in static storage
/// may be freed after any pool destructor would have run.
struct Pool {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> idle;
  BufferPoolStats stats;
  /// Idle bytes beyond this are freed instead of kept (KILN_BUFFER_POOL_MAX
  /// bytes; default 4 GiB).
  int64_t max_idle = [] {
    const char* e = std::getenv("KILN_BUFFER_POOL_MAX");
    return e ? std::atoll(e) : int64_t(4) << 30;
  }();
};

Pool& pool() {
  static Pool* p = new Pool();
  return *p;
}

std::atomic<int64_t>& allocationCount() {
  static std::atomic<int64_t> n{0};
  return n;
}

void* rawAlloc(size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) & ~size_t(63));
  if (!p) throw std::bad_alloc();
  return p;
}

void giveBack(size_t bytes, void* p) {
  Pool& pl = pool();
  {
    std::lock_guard<std::mutex> lock(pl.mu);
    if (pl.stats.idle_bytes + static_cast<int64_t>(bytes) <= pl.max_idle) {
      pl.idle[bytes].push_back(p);
      pl.stats.idle_bytes += static_cast<int64_t>(bytes);
      return;
    }
  }
  std::free(p);
}

}  // namespace

std::shared_ptr<unsigned char[]> allocateBuffer(size_t bytes) {
  allocationCount().fetch_add(1, std::memory_order_relaxed);
  if (bytes < kPooledMinBytes)
    return std::shared_ptr<unsigned char[]>(static_cast<unsigned char*>(rawAlloc(bytes ? bytes : 1)),
                                            [](unsigned char* p) { std::free(p); });
  Pool& pl = pool();
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(pl.mu);
    auto it = pl.idle.find(bytes);
    if (it != pl.idle.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      pl.stats.idle_bytes -= static_cast<int64_t>(bytes);
      ++pl.stats.hits;
    } else {
      ++pl.stats.misses;
    }
  }
  if (!p) p = rawAlloc(bytes);
  return std::shared_ptr<unsigned char[]>(static_cast<unsigned char*>(p),
                                          [bytes](unsigned char* q) { giveBack(bytes, q); });
}

BufferPoolStats bufferPoolStats() {
  Pool& pl = pool();
  std::lock_guard<std::mutex> lock(pl.mu);
  BufferPoolStats s = pl.stats;
  s.allocations = allocationCount().load(std::memory_order_relaxed);
  return s;
}

void releaseIdleBuffers() {
  Pool& pl = pool();
  std::lock_guard<std::mutex> lock(pl.mu);
  for (auto& [bytes, blocks] : pl.idle)
    for (void* p : blocks) std::free(p);
  pl.idle.clear();
  pl.stats.idle_bytes = 0;
}

uint64_t physicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

}  // namespace kiln
