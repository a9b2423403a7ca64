// Pipelines as data: which registered passes run, in which order, and why
// each sits where it does (the comment travels with the entry, so
// `kiln passes` and reports can show it).
#pragma once

#include <string>
#include <vector>

namespace kiln {

/// One step of a pipeline.
struct PipelineEntry {
  const char* pass;  ///< a name in the pass registry
  const char* why;   ///< why it is here, in this position
};

/// Which training graph a pipeline builds.
enum class TrainingGraphKind {
  Gradients,  ///< forward + loss + backward; Gradient outputs (kiln grad)
  Step,       ///< ... + optimizer update (kiln train)
  Eval,       ///< the forward in eval mode + loss and metrics, no backward (kiln train --eval-data)
};

/// The default pipeline from a forward graph to the training graph.
const std::vector<PipelineEntry>& trainingPipeline(TrainingGraphKind kind);

/// The pass names of a pipeline, in order.
std::vector<std::string> passNames(const std::vector<PipelineEntry>& pipeline);

}  // namespace kiln
