// Common-subexpression elimination.
#pragma once

#include "passes/pass.h"

namespace kiln {

/// Merge nodes that compute the same thing: same op, same input values,
/// same explicit attributes and output types. Random and side-effecting
/// ops are never merged. Statistics: nodes_removed.
Result<PassResult> runCse(Graph& g, PassContext& ctx);

}  // namespace kiln
