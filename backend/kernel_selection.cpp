#include "backend/kernel_selection.h"

#include <random>

#include "core/text_ir.h"

namespace kiln {

std::vector<Tensor> autotuneInputs(const Node& n) {
  std::mt19937 rng(0x5EED);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<Tensor> out;
  for (const Value* v : n.inputs()) {
    Tensor t(v->type());  // zeroed
    if (isFloating(v->dtype()))
      for (int64_t i = 0; i < t.numel(); ++i) t.set(i, u(rng));
    out.push_back(std::move(t));
  }
  return out;
}

std::string nodeSignature(const Node& n) {
  // printNode: "%7 = op(%a, %b) {attrs} : types @scope loc(...)". Keep the op,
  // the attributes and the output types; add the input types for the names.
  const std::string text = printNode(n);
  std::string sig = n.op() + "(";
  for (const Value* v : n.inputs()) sig += v->type().str() + ",";
  sig += ")";
  size_t after_inputs = text.find(')', text.find(n.op() + "("));
  size_t end = text.find(" @", after_inputs);
  if (end == std::string::npos) end = text.find(" loc(", after_inputs);
  if (after_inputs != std::string::npos) sig += text.substr(after_inputs + 1, end - after_inputs - 1);
  return sig;
}

int fastest(const std::vector<KernelTiming>& timings) {
  int best = -1;
  for (size_t i = 0; i < timings.size(); ++i)
    if (timings[i].millis >= 0 && (best < 0 || timings[i].millis < timings[best].millis)) best = static_cast<int>(i);
  return best;
}

Status checkFixedKernels(const KernelSelection& sel, size_t nodes) {
  if (!sel.fixed_kernels.empty() && sel.fixed_kernels.size() != nodes)
    return Error{"the compiled plan names " + std::to_string(sel.fixed_kernels.size()) + " kernels for " +
                 std::to_string(nodes) + " nodes"};
  return {};
}

}  // namespace kiln
