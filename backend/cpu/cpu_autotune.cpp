#include "backend/cpu/cpu_autotune.h"

#include <chrono>
#include <random>

#include "core/text_ir.h"

namespace kiln::cpu {
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

std::vector<KernelTiming> timeKernels(const Node& n, std::span<const KernelDef* const> kernels, int num_threads) {
  using Clock = std::chrono::steady_clock;
  const std::vector<Tensor> inputs = autotuneInputs(n);
  std::vector<KernelTiming> out;
  for (const KernelDef* k : kernels) {
    KernelTiming t{k->name, 0, {}};
    KernelContext ctx;
    ctx.num_threads = num_threads;
    try {
      std::vector<Tensor> outs(n.numOutputs());
      k->fn(n, inputs, outs, ctx);  // warm-up: caches, JIT, first touch
      double best = 1e300, total = 0;
      for (int run = 0; run < 20 && (run < 3 || total < 2.0); ++run) {
        const auto t0 = Clock::now();
        k->fn(n, inputs, outs, ctx);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        best = std::min(best, ms);
        total += ms;
      }
      t.millis = best;
    } catch (const std::exception& e) {
      t.millis = -1;
      t.error = e.what();
    }
    out.push_back(std::move(t));
  }
  return out;
}

int fastest(const std::vector<KernelTiming>& timings) {
  int best = -1;
  for (size_t i = 0; i < timings.size(); ++i)
    if (timings[i].millis >= 0 && (best < 0 || timings[i].millis < timings[best].millis)) best = static_cast<int>(i);
  return best;
}

}  // namespace kiln::cpu
