// Constant folding of splat constants (`full` nodes), and the splat helpers
// the algebraic rules (passes/algebraic_rules.h) share with it.
#pragma once

#include <optional>

#include "passes/pass.h"

namespace kiln {

/// The value every element of a tensor of dtype `t` holds when it is filled
/// with `v`, as the `full` kernel and `cast` store it (rounded to f32 / f16 /
/// bf16, truncated toward zero and wrapped for integers, `v != 0` for bool),
/// given back as a double. nullopt where the conversion is undefined (NaN,
/// infinity or out of int64 range to an integer type).
std::optional<double> splatElement(DType t, double v);

/// The element value of `v` when it is the output of a `full` node, as
/// splatElement of its dtype and value attributes; nullopt for anything else.
std::optional<double> splatValue(const Value* v);

/// Fold one node whose tensor inputs are all splat constants into a new
/// `full` node inserted before it, with its scope and provenance. Returns the
/// values replacing the node's outputs (one per output), or an empty vector
/// when the node cannot be folded exactly. Does not erase anything.
std::vector<Value*> foldNode(Graph& g, Node& n);

/// Constant folding: every node foldNode can fold is replaced by a `full`,
/// and the constants it made dead are erased. Statistics: folded,
/// nodes_removed.
Result<PassResult> runFold(Graph& g, PassContext& ctx);

}  // namespace kiln
