// Recycling of large tensor buffers. A training step allocates the same
// sizes every step; handing a freed buffer back to the next request of the
// same size avoids the mmap/munmap and page-fault cost glibc pays for every
// large block (for an 11M-parameter AdamW update, most of the update's time).
// PyTorch's CUDA caching allocator does the same for the same reason. The
// CPU executor places a step's intermediates in one planned arena
// (passes/memory_plan.h); the pool serves what the plan leaves out (what a
// step returns, kernel temporaries) and everything outside executors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace kiln {

/// A buffer of at least `bytes` bytes (never null), 64-byte aligned, from
/// the pool when a block of that size is idle; returned to the pool when the
/// last owner lets go. Blocks under kPooledMinBytes go straight to malloc.
std::shared_ptr<unsigned char[]> allocateBuffer(size_t bytes);

/// Smallest request worth pooling (malloc handles small blocks well).
inline constexpr size_t kPooledMinBytes = 64 * 1024;

struct BufferPoolStats {
  int64_t allocations = 0;  ///< every allocateBuffer call, small blocks included
  int64_t hits = 0, misses = 0;
  int64_t idle_bytes = 0;  ///< held by the pool, ready for reuse
};
BufferPoolStats bufferPoolStats();
/// Give every idle block back to the system.
void releaseIdleBuffers();

/// This machine's physical memory in bytes (0 when the system does not say).
uint64_t physicalMemoryBytes();

}  // namespace kiln
