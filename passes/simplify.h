// The simplify pass: algebraic rules and constant folding to a fixed point,
// then common-subexpression and dead-code elimination.
#pragma once

#include "passes/pass.h"

namespace kiln {

/// Rewrite the graph with the algebraic rule table (passes/algebraic_rules.h)
/// and constant folding (passes/fold.h) until neither applies, merge equal
/// nodes (runCse), and drop dead ones (runDce). Statistics: one
/// "rule.<name>" counter per rule that fired, folded, cse_merged and
/// nodes_removed (the net node count change).
Result<PassResult> runSimplify(Graph& g, PassContext& ctx);

}  // namespace kiln
