// allreduce_rows on the GPU (see cuda_collectives.h): pack this rank's rows
// and values (divided by the world size for an average) into its slot of
// the staging buffer on the compute stream; all-gather every slot through
// NCCL and sum per row on the communication stream.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_collectives.h"
#include "backend/cuda/cuda_dtype.cuh"
#include "backend/cuda/nccl_communicator.h"
#include "backend/cuda/row_coalesce.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;

RowCoalesceLayout coalesceLayout(const Node& n, const RowsStaging& s) {
  return rowCoalesceLayout(s.world * s.capacity, n.i("num_rows"), n.output(0)->type().numel());
}

/// Keys of the gathered rows: the row, or `bound` for the -1 padding and
/// (raising the fault flag) a row out of range.
__global__ void __launch_bounds__(kThreads)
    gatheredKeysKernel(const int64_t* __restrict__ rows, uint32_t* __restrict__ keys, int64_t n, int64_t bound,
                       int* flag, uint64_t node) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = rows[i];
    const bool ok = r >= 0 && r < bound;
    if (!ok && r != -1) raiseError(flag, node);
    keys[i] = static_cast<uint32_t>(ok ? r : bound);
  }
}

}  // namespace

RowsStaging rowsStaging(const Node& n) {
  RowsStaging s;
  s.world = n.i("world_size");
  s.capacity = n.input(0)->type().numel();
  s.dim = n.input(1)->type().shape[1];
  const size_t slots = static_cast<size_t>(s.world * s.capacity);
  s.rows = 0;
  s.values = alignUp(slots * 8);
  s.coalesce = s.values + alignUp(slots * static_cast<size_t>(s.dim) * dtypeSize(n.input(1)->dtype()));
  s.total = s.coalesce + coalesceLayout(n, s).total;
  return s;
}

void enqueueGatheredRowsSum(const Node& n, void* staging, std::span<const DeviceTensor> outs, cudaStream_t stream,
                            int* error_flag, uint64_t node_index) {
  const RowsStaging s = rowsStaging(n);
  const RowCoalesceLayout l = coalesceLayout(n, s);
  auto* base = static_cast<unsigned char*>(staging);
  void* ws = base + s.coalesce;
  if (l.sources > 0) {
    gatheredKeysKernel<<<gridFor(l.sources), kThreads, 0, stream>>>(reinterpret_cast<const int64_t*>(base + s.rows),
                                                                    coalesceKeys(ws, l), l.sources, l.bound, error_flag,
                                                                    node_index);
    checkLaunch("gatheredKeysKernel", &n);
  }
  enqueueRowCoalesce(ws, l, base + s.values, n.input(1)->dtype(), s.dim, outs[0].as<int64_t>(), outs[1].data, stream,
                     &n);
}

void enqueueRowsCollective(const Node& n, std::span<const DeviceTensor> ins, std::span<const DeviceTensor> outs,
                           void* staging, NcclCommunicator* comm, cudaStream_t pack_stream, cudaStream_t comm_stream,
                           cudaEvent_t packed, int* error_flag, uint64_t node_index) {
  const RowsStaging s = rowsStaging(n);
  const int rank = comm ? comm->rank() : 0, size = comm ? comm->size() : 1;
  if (comm && size != s.world)
    fail(n.describe() + ": compiled for " + std::to_string(s.world) + " ranks, run on " + std::to_string(size));
  auto* base = static_cast<unsigned char*>(staging);
  const DType dt = ins[1].dtype();
  const size_t es = dtypeSize(dt), slot_values = static_cast<size_t>(s.capacity * s.dim);
  // Pack (compute stream). Alone (no communicator) the other slots stay
  // padding, which the sum leaves out.
  if (!comm && s.world > 1)
    check(cudaMemsetAsync(base + s.rows, 0xFF, static_cast<size_t>(s.world * s.capacity) * 8, pack_stream),
          "clearing allreduce_rows's other slots", &n);
  check(cudaMemcpyAsync(base + s.rows + static_cast<size_t>(rank * s.capacity) * 8, ins[0].data, ins[0].bytes(),
                        cudaMemcpyDeviceToDevice, pack_stream),
        "staging allreduce_rows's rows", &n);
  unsigned char* mine = base + s.values + rank * slot_values * es;
  if (n.i("average") && size > 1)
    enqueueDivide(mine, ins[1].data, slot_values, dt, size, pack_stream, n);
  else
    check(cudaMemcpyAsync(mine, ins[1].data, ins[1].bytes(), cudaMemcpyDeviceToDevice, pack_stream),
          "staging allreduce_rows's values", &n);
  if (comm_stream != pack_stream) {
    check(cudaEventRecord(packed, pack_stream), "recording a collective's inputs staged", &n);
    check(cudaStreamWaitEvent(comm_stream, packed, 0), "ordering a collective after its inputs", &n);
  }
  // Exchange and sum (communication stream).
  if (comm && size > 1) {
    comm->allGather(base + s.rows, std::vector<size_t>(static_cast<size_t>(size), static_cast<size_t>(s.capacity)),
                    DType::I64, comm_stream);
    comm->allGather(base + s.values, std::vector<size_t>(static_cast<size_t>(size), slot_values), dt, comm_stream);
  }
  enqueueGatheredRowsSum(n, staging, outs, comm_stream, error_flag, node_index);
}

}  // namespace kiln::cuda
