// Typed node attributes. Text form: 3, 1.5, [1,2], [0.5,1.0], "relu", f32,
// and a nested graph (a region the node owns: a fused node's body).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.h"

namespace kiln {

class Graph;

/// A graph-valued attribute: a region owned by the node, like XLA's fusion
/// computation (fused_elementwise's `body`). Immutable once made, so nodes
/// that copy their attributes (clones, rewrites) share it. Two regions are
/// equal when they print the same (the text IR without scopes).
struct GraphAttr {
  std::shared_ptr<const Graph> graph;
  bool operator==(const GraphAttr& o) const;
};

enum class AttrKind : uint8_t { Int, Float, Ints, Floats, String, DType, Graph };

/// One attribute value. Booleans are Ints (0/1), as in the text form.
using Attr = std::variant<int64_t, double, std::vector<int64_t>, std::vector<double>, std::string, DType, GraphAttr>;

AttrKind attrKind(const Attr& a);
std::string_view attrKindName(AttrKind k);
/// Text-IR spelling; floats always carry a '.', an exponent, or inf/nan so
/// they never read back as ints, and print with full precision. A graph
/// prints as its text IR on one line (without scopes or source locations),
/// which the parser reads back in place.
std::string attrToString(const Attr& a);
/// Shortest text that reads back as exactly `v` ("1.0", "1e-05", "-inf").
std::string formatDouble(double v);

/// Attributes of a node, ordered by name so printing is deterministic.
using AttrMap = std::map<std::string, Attr>;

}  // namespace kiln
