#include "backend/cpu/cpu_autotune.h"

#include <chrono>

namespace kiln::cpu {
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

}  // namespace kiln::cpu
