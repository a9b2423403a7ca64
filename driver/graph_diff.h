// What a pass changed: the graphs before and after it (the report's pass IR,
// values numbered by id so a value keeps its number across passes), node by
// node and line by line. Nodes are matched by their result numbers; a node
// the pass added is tied to the nodes it replaced through the data flow
// (a surviving node that read the old result now reads the new one) and
// through provenance (same scope, one provenance inside the other, as a
// fused node's "fuse(2 nodes from mul @h.0.attn (model.py:154))" holds its
// first member's). Qt-free, for the passes view and its tests.
#pragma once

#include <string>
#include <vector>

#include "core/ir.h"
#include "core/result.h"

namespace kiln::driver {

/// One pass's IR, parsed, with each node's line and result numbers.
struct PassGraph {
  Graph graph;
  std::vector<std::string> lines;  ///< each node's text line (trimmed), in node order
  std::vector<std::string> keys;   ///< each node's results as written ("%57" or "%57, %58")
};

/// Parse IR printed with PrintOptions::value_ids. `where` names it in errors.
Result<PassGraph> parsePassGraph(const std::string& ir, const std::string& where);

enum class NodeChange { Same, Changed, Added, Removed };

struct GraphDiff {
  std::vector<NodeChange> before, after;  ///< per node of each graph (Removed only before, Added only after)
  /// The nodes on the other side a node corresponds to: itself (same
  /// results), or what it replaced / was replaced by.
  std::vector<std::vector<int>> after_of_before, before_of_after;
  int added = 0, removed = 0, changed = 0;
};

GraphDiff diffPassGraphs(const PassGraph& before, const PassGraph& after);

/// A unified diff of two texts by lines ("-old", "+new", " same"), with
/// `context` unchanged lines around each change and "@@ -a,n +b,m @@" hunk
/// headers; empty when they are equal.
std::string unifiedDiff(const std::string& before, const std::string& after, int context = 3);

}  // namespace kiln::driver
