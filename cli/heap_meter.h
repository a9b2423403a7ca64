// Heap bytes in use and their high-water mark, for `kiln bench`'s peak
// memory. The kiln executable interposes malloc and friends (heap_meter.cpp
// forwards to glibc's __libc_* entry points and counts malloc_usable_size),
// so every allocation counts: Kiln's tensors, libtorch's, oneDNN's, BLAS's.
#pragma once

#include <cstdint>

namespace kiln::cli {

/// False where the counting is not compiled in (sanitizer builds bring their
/// own malloc); then the functions below return 0.
bool heapMeterAvailable();
/// Bytes currently allocated through malloc/new.
int64_t heapInUse();
/// The high-water mark since the last resetHeapPeak().
int64_t heapPeak();
/// Start a new high-water mark at the current use.
void resetHeapPeak();

}  // namespace kiln::cli
