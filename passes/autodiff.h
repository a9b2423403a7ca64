// Reverse-mode automatic differentiation over the graph IR.
#pragma once

#include <vector>

#include "core/ir.h"
#include "core/result.h"
#include "passes/pass.h"

namespace kiln {

/// Append to `g` the nodes that compute d(loss)/d(v) for every v in `wrt`.
/// `loss` must be a 0-d floating value. Returns one entry per `wrt` value:
/// its gradient, or nullptr when the loss does not depend on it (PyTorch's
/// `.grad is None`). Only nodes on a path from `wrt` to `loss` are
/// differentiated; values used more than once get their gradients summed.
/// An op without a gradient rule on such a path is an error naming the node.
/// `seed` is d(objective)/d(loss), a 0-d value (nullptr: 1); amp's loss
/// scale goes here, which equals differentiating loss * scale.
Result<std::vector<Value*>> differentiate(Graph& g, Value* loss, const std::vector<Value*>& wrt,
                                          Value* seed = nullptr);

/// The autodiff pass: differentiates the graph's Loss output w.r.t. every
/// floating Param input (frozen ones too: the freeze pass removes what they
/// do not need) and adds one Gradient output per parameter that gets a
/// gradient, named like the parameter.
/// Statistics: nodes_added, params_with_grad, params_without_grad.
Result<PassResult> runAutodiff(Graph& g, PassContext& ctx);

}  // namespace kiln
