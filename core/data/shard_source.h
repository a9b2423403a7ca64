// Data-parallel batches: each rank trains on its own contiguous slice of
// every batch, so N ranks together see exactly the batch one process would
// (kiln train --nproc N).
#pragma once

#include <memory>
#include <string>

#include "core/data/batch_source.h"

namespace kiln {

/// Rank `rank` of `ranks`' part of `batch`: rows [rank*B/N, (rank+1)*B/N) of
/// every tensor along its first dimension. An error (naming `where` and the
/// tensor) when a tensor is 0-d or its first dimension does not divide by
/// the rank count.
Result<TensorMap> shardBatch(const TensorMap& batch, int rank, int ranks, const std::string& where);

/// `source`'s batches, each cut to this rank's part (shardBatch).
std::unique_ptr<BatchSource> shardedSource(std::unique_ptr<BatchSource> source, int rank, int ranks);

}  // namespace kiln
