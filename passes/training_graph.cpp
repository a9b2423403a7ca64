#include "passes/training_graph.h"

namespace kiln {

Result<Graph> buildTrainingGraph(const Graph& forward, PassContext& ctx, TrainingGraphKind kind,
                                 std::vector<PassTraceEntry>* trace, const PassManagerOptions& options) {
  auto pipeline = resolvePipeline(passNames(trainingPipeline(kind)), "the training pipeline");
  if (!pipeline) return pipeline.error();
  Graph g = forward.clone();
  if (Status s = runPipeline(g, ctx, *pipeline, options, trace); !s) return s.error();
  return g;
}

}  // namespace kiln
