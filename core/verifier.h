// Verifier: checks the invariants every pass may rely on.
//  - every node's op is in the op table, its input count is in range, its
//    attributes are declared by the op with the declared kind, required ones
//    are present;
//  - output types equal what the op's shape inference computes;
//  - values are defined before use (topological order), once, in this graph;
//    use lists match the operands;
//  - graph inputs have unique names and a role; outputs are defined values.
#pragma once

#include <string>

#include "core/ir.h"
#include "core/result.h"

namespace kiln {

/// OK, or an Error listing the first problems found (one per line after the
/// first, at most 10), each naming the node.
Status verify(const Graph& g);

}  // namespace kiln
