// The data_parallel pass: gradient communication for data-parallel training.
#pragma once

#include "passes/pass.h"

namespace kiln {

/// With ctx.training.data_parallel.world_size > 1, rewrites a graph whose
/// Gradient outputs autodiff made (before the optimizer pass) so that every
/// rank ends with the gradients of the whole batch, as PyTorch's
/// DistributedDataParallel gives them:
///  - the gradients of trained parameters (frozen ones excepted) are grouped
///    into buckets of about `bucket_bytes` (the first of about
///    `first_bucket_bytes`, 1 MiB, as DDP's), in the order the backward
///    produces them; each bucket is one `allreduce {average=1}` node placed
///    right after its last gradient's producer, so it can start while the
///    rest of the backward runs (the schedule pass keeps collectives early);
///  - embedding gradients of tables with more rows than the ranks' indices
///    can touch together, and those `sparse_patterns` select (patterns as
///    --freeze takes them; one that selects nothing is an error), get an
///    allreduce of their own with sparse=1 (block = one row), which sends
///    only the non-zero rows; with `row_sparse_embeddings` an embedding's
///    gradient is never made dense for it: embedding_backward_rows,
///    allreduce_rows and rows_to_dense (core/ops/row_sparse.cpp) replace its
///    embedding_backward, and sparse_updates gives SGD the rows;
///  - the Loss output and the accuracy metric are averaged over the ranks
///    (what single-process training on the whole batch reports), by an
///    allreduce right after them (it travels during the backward);
///  - BufferUpdate outputs (BatchNorm running statistics) are broadcast from
///    rank 0, DDP's broadcast_buffers, right after they are computed.
/// The Gradient outputs then hold the allreduced values; the optimizer
/// consumes them as before.
///
/// With zero_stage 1 (ZeRO-1) each communicated parameter gets an owner rank
/// (zeroOwners) and the graph is rank `rank`'s: a dense bucket becomes one
/// `reduce_scatter {average=1}` whose outputs are this rank's gradients
/// only; sparse gradients keep their allreduce. Only the owned parameters
/// keep a Gradient output, and ctx.zero_plan lists every parameter with its
/// owner for the optimizer pass (which updates the owned ones and
/// all-gathers them all). Statistics: buckets, sparse_gradients,
/// gradient_bytes, and with ZeRO-1 owned_gradients.
Result<PassResult> runDataParallel(Graph& g, PassContext& ctx);

/// ZeRO-1's partition, as torch's ZeroRedundancyOptimizer makes it: the
/// tensors sorted by element count, largest first (ties in the given order),
/// each given to the rank with the fewest elements so far (the lowest such
/// rank). Returns each tensor's owner, in the given order.
std::vector<int> zeroOwners(const std::vector<int64_t>& numels, int world_size);

}  // namespace kiln
