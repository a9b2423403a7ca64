// Graphviz rendering of DOT text (core/graph_dot.h makes it from a graph):
// layout with the `dot` engine and output as SVG, through libgvc in this
// process (no `dot` executable needed). Shared by `kiln export --format svg`
// and kiln-studio. Built into kiln_graphviz when libgvc is found.
#pragma once

#include <string>

#include "core/result.h"

namespace kiln {

/// Lay out `dot` and render it with `format` ("svg", "png", "plain" for
/// node positions). Errors: text Graphviz cannot parse, an unknown format
/// or layout failure, with Graphviz's own message.
Result<std::string> renderDot(const std::string& dot, const std::string& format);

}  // namespace kiln
