// Folding a big graph by module scope: each node is drawn alone or inside
// the box of the outermost scope of its module path ("h.3.attn.c_attn")
// that is not open, one box for the forward and one for the backward part
// of a scope. Large graphs open the scopes that add the fewest boxes first,
// while the boxes stay few enough to read at once; a double-click opens one
// more.
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "core/ir.h"

namespace kiln::driver {

struct FoldedGraph {
  struct Item {
    int node = -1;          ///< a node drawn alone (its index), or -1: a folded scope
    std::string scope;      ///< the folded scope ("h.3"), or the node's scope
    bool backward = false;  ///< the folded part is the backward (gradient) one
    bool split = false;     ///< the scope has a forward and a backward part (labels say which)
    int members = 1;        ///< nodes inside
  };
  std::vector<Item> items;
  std::vector<int> item_of_node;           ///< node index -> item index
  std::vector<std::pair<int, int>> edges;  ///< between items, each once, no self-loops
};

/// Per node (in order): part of the backward, i.e. a gradient ("grad of
/// ..." in its provenance) or downstream of one. By data flow rather than
/// provenance alone, so no folded forward part reads a backward one and the
/// folded graph keeps the step's forward-then-backward order.
std::vector<bool> backwardNodes(const Graph& g);

/// Draw every node alone when the graph has at most `max_items` nodes;
/// else the scopes to open so that at most `max_items` items are drawn,
/// the ones that add the fewest boxes first (a scope only after its parent).
std::set<std::string> defaultOpenScopes(const Graph& g, size_t max_items);

/// Every scope prefix of `g` ("h", "h.3", "h.3.attn", ...): all open.
std::set<std::string> allScopes(const Graph& g);

/// The graph with every scope not in `open` folded.
FoldedGraph foldGraph(const Graph& g, const std::set<std::string>& open);

}  // namespace kiln::driver
