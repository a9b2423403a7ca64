#include "passes/training_graph.h"

#include <chrono>

#include "core/verifier.h"
#include "passes/autodiff.h"
#include "passes/dce.h"
#include "passes/loss.h"
#include "passes/optimizer.h"

namespace kiln {

Result<Graph> buildTrainingGraph(const Graph& forward, PassContext& ctx, TrainingGraphKind kind,
                                 std::vector<PassTraceEntry>* trace) {
  using PassFn = Result<PassResult> (*)(Graph&, PassContext&);
  // Order matters: the loss defines what autodiff differentiates, autodiff's
  // Gradient outputs are what the optimizer consumes, and dce last drops the
  // forward outputs nobody reads any more (other outputs, unused branches).
  std::vector<std::pair<const char*, PassFn>> passes = {{"loss", runLoss}, {"autodiff", runAutodiff}};
  if (kind == TrainingGraphKind::Step) passes.emplace_back("optimizer", runOptimizer);
  passes.emplace_back("dce", runDce);

  Graph g = forward.clone();
  for (auto& [name, fn] : passes) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = fn(g, ctx);
    if (!r) return r.error();
    Status ok = verify(g);
    if (!ok) return Error{std::string("internal error: the graph after pass '") + name + "' does not verify: " +
                          ok.error().message};
    if (trace) {
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      trace->push_back({name, ms, std::move(*r), g.numNodes()});
    }
  }
  return g;
}

}  // namespace kiln
