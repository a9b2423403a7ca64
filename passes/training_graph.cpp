#include "passes/training_graph.h"

namespace kiln {

Result<Graph> buildTrainingGraph(const Graph& forward, PassContext& ctx, TrainingGraphKind kind,
                                 std::vector<PassTraceEntry>* trace, const PassManagerOptions& options,
                                 const std::vector<std::string>& names) {
  auto pipeline = names.empty() ? resolvePipeline(passNames(trainingPipeline(kind)), "the training pipeline")
                                : resolvePipeline(names, "--passes");
  if (!pipeline) return pipeline.error();
  Graph g = forward.clone();
  if (Status s = runPipeline(g, ctx, *pipeline, options, trace); !s) return s.error();
  return g;
}

}  // namespace kiln
