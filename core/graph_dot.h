// Graphviz DOT export of a graph: one box per node labelled with op and
// result type, nodes grouped into clusters by top-level module scope.
#pragma once

#include <string>

#include "core/ir.h"

namespace kiln {

std::string graphToDot(const Graph& g);

}  // namespace kiln
