// Text form of the IR: one line per node. A printer and a parser that
// round-trip (print(parse(print(g))) == print(g)). Dumps, golden tests and
// error messages all use it.
//
//   graph main(%input0: f32[2,3] data, %fc.weight: f32[4,3] param) {
//     %0 = linear(%input0, %fc.weight) : f32[2,4] @fc loc("model.py:12")
//     %1, %2 = split(%0) {dim=1, sizes=[2,2]} : f32[2,2], f32[2,2]
//     return %1 "output0", %2 "output1"
//   }
//
// Intermediates are renumbered %0, %1, ... in order when printed; graph
// inputs keep their names (quoted, %"...", when they are not plain
// [A-Za-z0-9_.] names or are all digits). A return entry is `%v "name" [role]`
// with role defaulting to `output`.
//
// A graph-valued attribute (a region the node owns: a fused node's body) is
// a nested graph with values of its own, printed on its node's line:
//
//     %3 = fused_elementwise(%1) {body=graph fused(%i0: f32[4] data) { %0 = relu(%i0) : f32[4] return %0 "o0" }} : f32[4]
//
// The parser also reads a region laid out over several lines.
//
// The string form earlier versions printed (body="graph fused(...) {...}")
// still reads, as the same region.
#pragma once

#include <string>

#include "core/ir.h"
#include "core/result.h"

namespace kiln {

struct PrintOptions {
  bool scopes = true;      ///< print "@scope"
  bool provenance = true;  ///< print loc("...")
  /// Number intermediates by their Value id instead of 0, 1, ... in order,
  /// so a value keeps its number from one pass's dump to the next (the
  /// before/after diffs of kiln-studio's passes view). Still parses.
  bool value_ids = false;
  /// The whole graph on one line ("graph g(...) { %0 = ... return %0 "o" }"):
  /// how a region prints on the line of the node that owns it.
  bool one_line = false;
};

/// The attributes `op` declares as graphs that `attrs` holds as strings (the
/// form earlier text IR and JSON wrote: body="graph fused(...) {...}"),
/// parsed into regions in place. Throws KilnException naming the attribute.
void parseStringRegions(std::string_view op, AttrMap& attrs);

/// Print a graph.
std::string printGraph(const Graph& g, const PrintOptions& options = {});
/// Print one node as it appears in printGraph (values numbered locally).
std::string printNode(const Node& n);

/// Parse a graph. `where` names the source in errors ("file.kir"); errors
/// carry line and column. Output types are taken from the text; run the
/// verifier to check them against shape inference.
Result<Graph> parseGraph(const std::string& text, const std::string& where = "<text>");

}  // namespace kiln
