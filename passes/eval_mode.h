// The forward in evaluation mode (model.eval()), for the held-out
// evaluation of kiln train --eval-data.
#pragma once

#include "passes/pass.h"

namespace kiln {

/// eval_mode: BatchNorm normalizes with its running statistics and no longer
/// updates them, dropout passes its input through, as after model.eval().
/// Statistics: batch_norms, dropouts (the nodes switched).
Result<PassResult> runEvalMode(Graph& g, PassContext& ctx);

}  // namespace kiln
