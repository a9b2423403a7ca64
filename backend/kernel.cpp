#include "backend/kernel.h"

#include <algorithm>

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
    registerCpuFusedKernels(r);
    return r;
  }();
  return reg;
}

void KernelRegistry::add(KernelDef k) {
  auto& v = by_op_[k.op];
  v.push_back(std::move(k));
  std::stable_sort(v.begin(), v.end(), [](const KernelDef& a, const KernelDef& b) { return a.priority > b.priority; });
}

const KernelDef* KernelRegistry::select(const Node& n) const {
  auto it = by_op_.find(n.op());
  if (it == by_op_.end()) return nullptr;
  for (const KernelDef& k : it->second)
    if (!k.supports || k.supports(n)) return &k;
  return nullptr;
}

std::vector<const KernelDef*> KernelRegistry::candidates(std::string_view op) const {
  std::vector<const KernelDef*> out;
  auto it = by_op_.find(op);
  if (it != by_op_.end())
    for (const KernelDef& k : it->second) out.push_back(&k);
  return out;
}

std::vector<std::string> KernelRegistry::ops() const {
  std::vector<std::string> out;
  for (const auto& [op, _] : by_op_) out.push_back(op);
  return out;
}

Tensor& allocOutput(const Node& n, std::span<Tensor> outputs, size_t i) {
  const TensorType& t = n.output(i)->type();
  if (outputs[i].defined() && outputs[i].type() == t) return outputs[i];  // placed by the executor
  outputs[i] = Tensor::empty(t);
  return outputs[i];
}

}  // namespace kiln
