// The collective ops on the GPU (allreduce, broadcast, reduce_scatter,
// allgather; core/ops/collective.cpp) through NCCL (nccl_communicator.h).
//
// A collective's inputs are packed into a staging buffer of its own, in the
// layout every rank shares (core/collective_layout.h), dividing by the world
// size on the way for an averaged allreduce (DDP's division before the sum,
// with the CPU engine's rounding). The packing runs on the compute stream,
// so the inputs may be overwritten as soon as the next kernels run. The
// exchange and the copies into the outputs run on the communication stream
// after an event, overlapping the compute that follows; the executor makes
// the compute stream wait for the collective before the first kernel that
// reads one of its outputs (cuda_executor.h). With one rank (no NCCL
// communicator) the outputs are the inputs. A block-sparse allreduce is a
// dense one here: same result, NCCL has no block-sparse exchange.
//
// allreduce_rows (a row-sparse embedding gradient, core/ops/row_sparse.cpp)
// has a static capacity K per rank and a row count only the step knows, and
// a captured step cannot ask the host: every rank's K rows and values are
// all-gathered whole (the -1 padding included: K is the batch's positions,
// far below the table), then summed per row in rank order on the
// communication stream (row_coalesce.h), which leaves the union of the
// ranks' rows, ascending, padded to the output's capacity.
#pragma once

#include <cuda_runtime_api.h>

#include <span>

#include "backend/cuda/cuda_kernel.h"

namespace kiln::cuda {

class NcclCommunicator;

/// Bytes of staging collective node `n` needs (its inputs, each dtype group
/// aligned to 256 bytes).
size_t collectiveStagingBytes(const Node& n);

/// Enqueue collective node `n` as described above. `comm` may be nullptr
/// (one rank). When `comm_stream` differs from `pack_stream`, `packed` is
/// recorded on pack_stream and waited for on comm_stream.
/// A data fault (allreduce_rows: a row out of range) raises `*error_flag`
/// with `node_index` (cuda_kernel.h).
void enqueueCollective(const Node& n, std::span<const DeviceTensor> ins, std::span<const DeviceTensor> outs,
                       void* staging, NcclCommunicator* comm, cudaStream_t pack_stream, cudaStream_t comm_stream,
                       cudaEvent_t packed, int* error_flag, uint64_t node_index);

/// dst = src / ranks for `count` elements of floating `dt` on `stream`
/// (DDP's division, rounded as the CPU engine rounds it).
void enqueueDivide(void* dst, const void* src, size_t count, DType dt, int ranks, cudaStream_t stream, const Node& n);

/// Where allreduce_rows keeps what it gathers in its staging buffer: rank
/// r's K rows at rows + r x K x 8 bytes, its values at values + r x K x dim
/// x the element size, for world_size ranks; then the coalesce's workspace.
struct RowsStaging {
  int64_t world = 1, capacity = 0, dim = 0;  ///< capacity: K, one rank's rows
  size_t rows = 0, values = 0, coalesce = 0, total = 0;
};
RowsStaging rowsStaging(const Node& n);

/// enqueueCollective of an allreduce_rows node (collective_rows.cu).
void enqueueRowsCollective(const Node& n, std::span<const DeviceTensor> ins, std::span<const DeviceTensor> outs,
                           void* staging, NcclCommunicator* comm, cudaStream_t pack_stream, cudaStream_t comm_stream,
                           cudaEvent_t packed, int* error_flag, uint64_t node_index);

/// The second half of allreduce_rows, on `stream`: sum what `staging`
/// holds (every rank's rows and values, as RowsStaging places them) into
/// outs (rows, values).
void enqueueGatheredRowsSum(const Node& n, void* staging, std::span<const DeviceTensor> outs, cudaStream_t stream,
                            int* error_flag, uint64_t node_index);

}  // namespace kiln::cuda
