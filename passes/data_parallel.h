// The data_parallel pass: gradient communication for data-parallel training.
#pragma once

#include "passes/pass.h"

namespace kiln {

/// With ctx.training.data_parallel.world_size > 1, rewrites a graph whose
/// Gradient outputs autodiff made (before the optimizer pass) so that every
/// rank ends with the gradients of the whole batch, as PyTorch's
/// DistributedDataParallel gives them:
///  - the gradients of trained parameters (frozen ones excepted) are grouped
///    into buckets of about `bucket_bytes`, in the order the backward
///    produces them; each bucket is one `allreduce {average=1}` node placed
///    right after its last gradient's producer, so it can start while the
///    rest of the backward runs (the schedule pass keeps collectives early);
///  - embedding gradients, and those `sparse_patterns` select (patterns as
///    --freeze takes them; one that selects nothing is an error), get an
///    allreduce of their own with sparse=1 (block = one row), which sends
///    only the non-zero rows;
///  - the Loss output and the accuracy metric are averaged over the ranks
///    (what single-process training on the whole batch reports);
///  - BufferUpdate outputs (BatchNorm running statistics) are broadcast from
///    rank 0, DDP's broadcast_buffers.
/// The Gradient outputs then hold the allreduced values; the optimizer
/// consumes them as before. Statistics: buckets, sparse_gradients,
/// gradient_bytes.
Result<PassResult> runDataParallel(Graph& g, PassContext& ctx);

}  // namespace kiln
