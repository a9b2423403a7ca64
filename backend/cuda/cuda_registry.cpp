#include "backend/cuda/cuda_kernel.h"
#include "backend/kernel_memory_rules.h"

namespace kiln::cuda {

const CudaKernelRegistry& CudaKernelRegistry::get() {
  static const CudaKernelRegistry reg = [] {
    CudaKernelRegistry r;
    registerCudaElementwiseKernels(r);
    registerCudaUnaryKernels(r);
    registerCudaShapeKernels(r);
    registerCudaIndexKernels(r);
    registerCudaReductionKernels(r);
    registerCudaNormKernels(r);
    registerCudaSoftmaxKernels(r);
    registerCudaLossKernels(r);
    registerCudaEmbeddingKernels(r);
    registerCudaDropoutKernels(r);
    registerCudaGemmKernels(r);
    registerCudaConvKernels(r);
    registerCudaOptimizerKernels(r);
    registerCudaRowUpdateKernels(r);
    registerCudaFusedKernels(r);
    registerCudaCollectiveKernels(r);
    return r;
  }();
  return reg;
}

MemoryRules cudaMemoryRules(const DialectOrder& order) {
  return kernelMemoryRules(CudaKernelRegistry::get(), order, order.restricted() ? "cuda[" + order.str() + "]" : "cuda");
}

}  // namespace kiln::cuda
