// CUDA kernels: their entry point, the per-node context the executor hands
// them, and the registry of every device kernel family. Dialects: `cuda`
// (Kiln's own kernels), `cublas`, `cublaslt`, `cudnn`, `nvrtc` (fused
// kernels generated at compile time). Selection is kernel_table.h's, the
// same as on the host.
//
// The contract every CUDA kernel keeps, so a whole step can be captured
// into one CUDA graph and replayed:
// - it only enqueues work on `ctx.stream`: no host synchronization, no
//   cudaMalloc/cudaFree, no pageable copies; scratch memory comes from
//   `ctx.workspace` (sized by the kernel's `workspace` function, planned
//   with the arena);
// - its outputs arrive allocated (contiguous, the node's exact types) and
//   it writes every element of each (nothing is zeroed for it);
// - what varies from step to step is read from device memory, never baked
//   into launch arguments: the random seed of the run is `*ctx.run_seed`;
// - a fault in the data (an index out of range) cannot throw without a sync:
//   the kernel skips the element and records `node_index + 1` in
//   `*ctx.error_flag` (atomicCAS from 0); the executor reports it at the
//   next synchronization (reading the loss) with the node named;
// - a bad launch (cudaGetLastError after the launch) or a library status
//   throws KilnException through cuda_check.h, naming the node.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <string>

#include "backend/kernel_table.h"
#include "core/ir.h"
#include "core/memory_rules.h"

namespace kiln::cuda {

/// A contiguous tensor in device memory (not owned).
struct DeviceTensor {
  TensorType type;
  void* data = nullptr;

  DType dtype() const { return type.dtype; }
  const Shape& shape() const { return type.shape; }
  int64_t numel() const { return type.numel(); }
  size_t bytes() const { return type.bytes(); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

/// Library handles, created once per executor (cuda_libraries.h).
struct Libraries;
/// NCCL between the ranks of a data-parallel run (nccl_communicator.h).
class NcclCommunicator;

/// What a kernel may use while it enqueues one node.
struct CudaContext {
  cudaStream_t stream = nullptr;
  Libraries* libs = nullptr;
  void* workspace = nullptr;  ///< this node's scratch, `workspace_bytes` long
  size_t workspace_bytes = 0;
  uint64_t node_index = 0;             ///< the node's index in the schedule
  const uint64_t* run_seed = nullptr;  ///< device: this run's seed (CPU's ctx.seed)
  int* error_flag = nullptr;           ///< device: 0, or the faulting node_index + 1
  const Node* node = nullptr;          ///< for error messages
  NcclCommunicator* nccl = nullptr;    ///< collectives: the ranks (nullptr: one rank)
};

/// Sub-buffers of a node's workspace start on 256-byte boundaries: `bytes`
/// rounded up to one.
inline size_t alignUp(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

/// ctx.workspace after checking that it holds `bytes` (nullptr for 0 bytes);
/// less than that means the kernel's WorkspaceFn undercounted, a Kiln bug,
/// reported naming the node.
inline void* requireWorkspace(CudaContext& ctx, size_t bytes) {
  if (bytes > ctx.workspace_bytes)
    fail((ctx.node ? ctx.node->describe() : std::string("CUDA kernel")) + ": needs " + std::to_string(bytes) +
         " bytes of workspace, got " + std::to_string(ctx.workspace_bytes));
  return bytes ? ctx.workspace : nullptr;
}

using CudaKernelFn = void (*)(const Node& n, std::span<const DeviceTensor> inputs,
                              std::span<const DeviceTensor> outputs, CudaContext& ctx);
/// Bytes of scratch the kernel needs for `n` (nullptr: none).
using WorkspaceFn = size_t (*)(const Node& n);
/// Work done once per node when a plan is bound, before any step (and
/// never while a step is captured): e.g. building a generated kernel with
/// NVRTC. Throws KilnException naming the node on failure.
using PrepareFn = void (*)(const Node& n);

struct CudaKernelDef {
  std::string op;
  std::string dialect;                 ///< "cuda", "cublas", "cublaslt", "cudnn", "nvrtc", "nccl"
  std::string name;                    ///< unique, "dialect.op[_variant]"
  int priority = 0;                    ///< higher wins
  KernelPredicate supports = nullptr;  ///< nullptr: all nodes of `op`
  CudaKernelFn fn = nullptr;
  WorkspaceFn workspace = nullptr;
  PrepareFn prepare = nullptr;
  /// The output is input 0's buffer reinterpreted (reshape): the executor
  /// passes outputs[0].data == inputs[0].data and the kernel does nothing.
  bool output_views_input0 = false;
  /// As KernelDef::updates_in_place (optimizer updates).
  bool updates_in_place = false;
  /// As KernelDef::writes_over_input (elementwise loops).
  bool writes_over_input = false;
};

/// A kernel of Kiln's own dialect `cuda`: op `op`, named "cuda.OP", priority 0.
inline CudaKernelDef ownCudaKernel(const char* op, CudaKernelFn fn, WorkspaceFn workspace = nullptr,
                                   KernelPredicate supports = nullptr) {
  CudaKernelDef d;
  d.op = op;
  d.dialect = "cuda";
  d.name = std::string("cuda.") + op;
  d.supports = supports;
  d.fn = fn;
  d.workspace = workspace;
  return d;
}

class CudaKernelRegistry : public KernelTable<CudaKernelDef> {
 public:
  /// Every CUDA kernel family registered.
  static const CudaKernelRegistry& get();
};

/// The GPU's memory rules under a dialect selection, read off the registry
/// (backend/kernel_memory_rules.h): target "cuda" or "cuda[dialects]".
MemoryRules cudaMemoryRules(const DialectOrder& order = {});

// Family registration, one per file of backend/cuda/.
void registerCudaElementwiseKernels(CudaKernelRegistry& r);  // kernels_elementwise.cu
void registerCudaUnaryKernels(CudaKernelRegistry& r);        // kernels_unary.cu (+ *_backward)
void registerCudaShapeKernels(CudaKernelRegistry& r);        // kernels_shape.cu
void registerCudaIndexKernels(CudaKernelRegistry& r);        // kernels_index.cu (+ cumsum)
void registerCudaReductionKernels(CudaKernelRegistry& r);    // kernels_reduction.cu
void registerCudaNormKernels(CudaKernelRegistry& r);         // kernels_norm.cu
void registerCudaSoftmaxKernels(CudaKernelRegistry& r);      // kernels_softmax.cu
void registerCudaLossKernels(CudaKernelRegistry& r);         // kernels_loss.cu
void registerCudaEmbeddingKernels(CudaKernelRegistry& r);    // kernels_embedding.cu
void registerCudaDropoutKernels(CudaKernelRegistry& r);      // kernels_dropout.cu
void registerCudaGemmKernels(CudaKernelRegistry& r);         // kernels_gemm.cpp (cuBLAS, cuBLASLt)
void registerCudaConvKernels(CudaKernelRegistry& r);         // kernels_conv.cpp (cuDNN) + kernels_pool.cu
void registerCudaOptimizerKernels(CudaKernelRegistry& r);    // kernels_optim.cu
void registerCudaRowUpdateKernels(CudaKernelRegistry& r);    // kernels_optim_rows.cu (sgd_update_rows)
void registerCudaFusedKernels(CudaKernelRegistry& r);        // kernels_fused.cpp (NVRTC)
void registerCudaCollectiveKernels(CudaKernelRegistry& r);   // kernels_collective.cu (NCCL)

}  // namespace kiln::cuda
