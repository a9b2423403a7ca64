// The collective kernels (dialect nccl): see cuda_collectives.h.
#include <cuda_runtime.h>

#include <map>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_collectives.h"
#include "backend/cuda/cuda_dtype.cuh"
#include "backend/cuda/nccl_communicator.h"
#include "core/collective_layout.h"

namespace kiln::cuda {
namespace {

/// dst = src / ranks: DDP's division, rounded as the CPU engine rounds it
/// (f16/bf16 divided in float).
template <typename T>
__global__ void divideKernel(T* dst, const T* src, size_t count, int ranks) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if constexpr (kIsHalf<T>)
      dst[i] = fromFloat<T>(toFloat(src[i]) / static_cast<float>(ranks));
    else
      dst[i] = src[i] / static_cast<T>(ranks);
  }
}

void collectiveKernel(const Node& n, std::span<const DeviceTensor> ins, std::span<const DeviceTensor> outs,
                      CudaContext& ctx) {
  enqueueCollective(n, ins, outs, requireWorkspace(ctx, collectiveStagingBytes(n)), ctx.nccl, ctx.stream, ctx.stream,
                    nullptr, ctx.error_flag, ctx.node_index);
}

}  // namespace

void enqueueDivide(void* dst, const void* src, size_t count, DType dt, int ranks, cudaStream_t stream, const Node& n) {
  if (count == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>((count + 255) / 256, 4096));
  dispatchFloating(dt, "averaging allreduce", [&](auto tag) {
    using T = decltype(tag);
    divideKernel<T><<<blocks, 256, 0, stream>>>(static_cast<T*>(dst), static_cast<const T*>(src), count, ranks);
  });
  checkLaunch("divideKernel", &n);
}

size_t collectiveStagingBytes(const Node& n) {
  if (n.is(Op::allreduce_rows)) return rowsStaging(n).total;
  std::map<DType, size_t> by_dtype;
  for (const Value* v : n.inputs()) by_dtype[v->dtype()] += v->type().bytes();
  size_t total = 0;
  for (const auto& [dt, bytes] : by_dtype) total += alignUp(bytes);
  return total;
}

void enqueueCollective(const Node& n, std::span<const DeviceTensor> ins, std::span<const DeviceTensor> outs,
                       void* staging, NcclCommunicator* comm, cudaStream_t pack_stream, cudaStream_t comm_stream,
                       cudaEvent_t packed, int* error_flag, uint64_t node_index) {
  if (n.is(Op::allreduce_rows))
    return enqueueRowsCollective(n, ins, outs, staging, comm, pack_stream, comm_stream, packed, error_flag, node_index);
  using Kind = CollectiveLayout::Kind;
  const int rank = comm ? comm->rank() : 0, size = comm ? comm->size() : 1;
  const CollectiveLayout l = layoutCollective(n, rank, size);
  auto* base = static_cast<unsigned char*>(staging);
  // Pack (compute stream): after this the inputs are free.
  size_t at = 0;
  for (const CollectiveLayout::Group& g : l.groups) {
    for (const CollectiveLayout::Member& m : g.members) {
      if (!m.bytes || (l.kind == Kind::AllGather && !m.mine)) continue;  // another rank's placeholder
      if (l.average && size > 1)
        enqueueDivide(base + at + m.offset, ins[m.input].data, m.bytes / dtypeSize(g.dtype), g.dtype, size, pack_stream,
                      n);
      else
        check(cudaMemcpyAsync(base + at + m.offset, ins[m.input].data, m.bytes, cudaMemcpyDeviceToDevice, pack_stream),
              "staging a collective's input", &n);
    }
    at += alignUp(g.bytes);
  }
  if (comm_stream != pack_stream) {
    check(cudaEventRecord(packed, pack_stream), "recording a collective's inputs staged", &n);
    check(cudaStreamWaitEvent(comm_stream, packed, 0), "ordering a collective after its inputs", &n);
  }
  // Exchange and unpack (communication stream).
  at = 0;
  for (const CollectiveLayout::Group& g : l.groups) {
    unsigned char* buf = base + at;
    if (comm) switch (l.kind) {
        case Kind::Broadcast:
          comm->broadcast(buf, g.bytes, static_cast<int>(l.root), comm_stream);
          break;
        case Kind::ReduceScatter:
          comm->reduceScatterSum(buf, g.counts, g.dtype, comm_stream);
          break;
        case Kind::AllGather:
          comm->allGather(buf, g.counts, g.dtype, comm_stream);
          break;
        case Kind::Allreduce:
          comm->allreduceSum(buf, g.bytes / dtypeSize(g.dtype), g.dtype, comm_stream);
          break;
      }
    for (const CollectiveLayout::Member& m : g.members)
      if (m.output >= 0 && m.bytes)
        check(cudaMemcpyAsync(outs[static_cast<size_t>(m.output)].data, buf + m.offset, m.bytes,
                              cudaMemcpyDeviceToDevice, comm_stream),
              "writing a collective's result", &n);
    at += alignUp(g.bytes);
  }
}

void registerCudaCollectiveKernels(CudaKernelRegistry& r) {
  for (const char* op : {"allreduce", "broadcast", "reduce_scatter", "allgather", "allreduce_rows"}) {
    CudaKernelDef d;
    d.op = op;
    d.dialect = "nccl";
    d.name = std::string("nccl.") + op;
    d.fn = collectiveKernel;
    d.workspace = collectiveStagingBytes;
    r.add(d);
  }
}

}  // namespace kiln::cuda
