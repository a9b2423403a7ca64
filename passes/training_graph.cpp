#include "passes/training_graph.h"

namespace kiln {

Result<Graph> buildTrainingGraph(const Graph& forward, PassContext& ctx, TrainingGraphKind kind,
                                 std::vector<PassTraceEntry>* trace, const PassManagerOptions& options,
                                 const std::vector<const PassInfo*>& pipeline) {
  std::vector<const PassInfo*> passes = pipeline;
  if (passes.empty()) {
    auto defaults = resolvePipeline(passNames(trainingPipeline(kind)), "the training pipeline");
    if (!defaults) return defaults.error();
    passes = std::move(*defaults);
  }
  Graph g = forward.clone();
  if (Status s = runPipeline(g, ctx, passes, options, trace); !s) return s.error();
  return g;
}

}  // namespace kiln
