// Data loading ahead of the step: wraps a BatchSource and reads the next
// `depth` batches on a thread of its own while the step runs, so a step
// whose batch is ready never waits for it. Batches are still a function of
// the step number (batch_source.h): prefetching changes when a batch is
// read, never which. The prefetch thread is one more thread beside the
// executor's pool; it only reads and decodes files.
#pragma once

#include <memory>

#include "core/data/batch_source.h"

namespace kiln {

class TraceRecorder;

struct PrefetchStats {
  int64_t served_ready = 0;   ///< batch() calls answered without waiting
  int64_t served_waited = 0;  ///< calls that waited for the thread (or read inline)
  double waited_ms = 0;       ///< time batch() spent waiting
  int64_t ready_now = 0;      ///< batches read and not yet asked for, at the time of stats()
};

class PrefetchSource : public BatchSource {
 public:
  virtual PrefetchStats stats() const = 0;
};

/// `depth` >= 1 batches ahead of the last one asked for; `trace` (optional)
/// gets a slice per batch read on the prefetch thread and per wait.
std::unique_ptr<PrefetchSource> prefetchingSource(std::unique_ptr<BatchSource> inner, int depth,
                                                  TraceRecorder* trace = nullptr);

}  // namespace kiln
