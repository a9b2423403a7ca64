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
void enqueueCollective(const Node& n, std::span<const DeviceTensor> ins, std::span<const DeviceTensor> outs,
                       void* staging, NcclCommunicator* comm, cudaStream_t pack_stream, cudaStream_t comm_stream,
                       cudaEvent_t packed);

}  // namespace kiln::cuda
