// Dead-code elimination.
#pragma once

#include "passes/pass.h"

namespace kiln {

/// Remove every node none of whose outputs is used or a graph output (side-
/// effecting ops stay). Graph inputs are kept: they are the model's state.
/// Statistics: nodes_removed.
Result<PassResult> runDce(Graph& g, PassContext& ctx);

}  // namespace kiln
