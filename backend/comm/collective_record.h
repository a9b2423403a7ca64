// What one collective of one step did (CollectiveEngine records them; the
// report's `communication` and `kiln comm` show them). Plain data, so the
// report's types can hold it without the engine's headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

/// One collective of one step.
struct CollectiveRecord {
  std::string node;        ///< "allreduce @data_parallel"
  std::string collective;  ///< "allreduce", "broadcast"
  /// "bcube" or "ring" (the communicator's dense allreduce), "block-sparse",
  /// "row allgather" or "row owner-sum" (allreduce_rows: how its values
  /// travelled), "dense fallback" (a sparse allreduce too dense to pay),
  /// "broadcast".
  std::string algorithm;
  int64_t bucket = 0;                     ///< the node's bucket attribute (-1: loss and metrics)
  size_t tensors = 0;                     ///< tensors in it
  uint64_t dense_bytes = 0;               ///< the tensors' bytes
  uint64_t sent_bytes = 0;                ///< bytes this rank sent (ring formula for dense, counted for sparse)
  size_t blocks = 0, nonzero_blocks = 0;  ///< sparse allreduce: blocks, and this rank's non-zero ones
  double start_ms = 0;                    ///< when the executor started it, from the engine's step origin
  double begin_ms = 0;                    ///< when the communication thread took it up
  double end_ms = 0;                      ///< when its outputs were complete
  double waited_ms = 0;                   ///< how long the executor blocked on it (the part not hidden)
};

}  // namespace kiln
