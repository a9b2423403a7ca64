#include "backend/kernel.h"

#include <algorithm>

#include "backend/kernel_memory_rules.h"

namespace kiln {

const KernelRegistry& KernelRegistry::cpu() {
  static const KernelRegistry reg = [] {
    KernelRegistry r;
    registerCpuElementwiseKernels(r);
    registerCpuReductionKernels(r);
    registerCpuShapeKernels(r);
    registerCpuLinalgKernels(r);
    registerCpuNNKernels(r);
    registerCpuLossKernels(r);
    registerCpuElementwiseGradKernels(r);
    registerCpuShapeGradKernels(r);
    registerCpuNNGradKernels(r);
    registerCpuNormGradKernels(r);
    registerCpuLossGradKernels(r);
    registerCpuOptimizerKernels(r);
    registerCpuRowSparseKernels(r);
    registerCpuFusedKernels(r);
    registerCpuCollectiveKernels(r);
    return r;
  }();
  return reg;
}

MemoryRules cpuMemoryRules(const DialectOrder& order) {
  return kernelMemoryRules(KernelRegistry::cpu(), order, order.restricted() ? "cpu[" + order.str() + "]" : "cpu");
}

Tensor& allocOutput(const Node& n, std::span<Tensor> outputs, size_t i) {
  const TensorType& t = n.output(i)->type();
  if (outputs[i].defined() && outputs[i].type() == t) return outputs[i];  // placed by the executor
  outputs[i] = Tensor::empty(t);
  return outputs[i];
}

}  // namespace kiln
