// Graphviz DOT export of a graph: one box per node labelled with op and
// result type, nodes grouped into clusters by top-level module scope.
#pragma once

#include <string>

#include "core/ir.h"

namespace kiln {

/// `inputs_and_outputs` false leaves out the graph's inputs and outputs
/// (parameters, optimizer state, the batch, the updates): the compact
/// drawing kiln-studio lays out.
std::string graphToDot(const Graph& g, bool inputs_and_outputs = true);

}  // namespace kiln
