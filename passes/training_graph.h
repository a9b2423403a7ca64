// Building the whole training step from a forward graph: the passes that run,
// in order, with a trace of what each did.
#pragma once

#include <string>
#include <vector>

#include "core/ir.h"
#include "passes/pass.h"

namespace kiln {

/// What one pass did (for `kiln train --verbose`, reports, the inspector).
struct PassTraceEntry {
  std::string pass;
  double millis = 0;
  PassResult result;
  size_t nodes_after = 0;
};

/// Which graph to build.
enum class TrainingGraphKind {
  Gradients,  ///< forward + loss + backward; Gradient outputs (kiln grad)
  Step,       ///< ... + optimizer update (kiln train)
};

/// Clone `forward` and run loss -> autodiff -> [optimizer] -> dce on it,
/// verifying after each pass. Errors say which pass failed and why.
Result<Graph> buildTrainingGraph(const Graph& forward, PassContext& ctx, TrainingGraphKind kind,
                                 std::vector<PassTraceEntry>* trace = nullptr);

}  // namespace kiln
