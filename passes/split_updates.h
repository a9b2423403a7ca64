// split_updates: one optimizer update per parameter instead of one for all.
//
// What it does: replaces a multi-tensor sgd_update / adam_update by one node
// per parameter (same scalars, same attributes), so that `schedule` can run
// each update as soon as its gradient is ready and the gradient dies right
// there instead of waiting, with every other gradient, for the last one.
// It splits only when the update's scalars (learning rate, step, gradient
// scale) do not depend on any gradient: with global-norm clipping or fp16
// loss scaling every update needs every gradient anyway, and one kernel for
// all is then the better choice.
//
// Needs: the optimizer has run. Guarantees: the same values bit for bit (the
// update is elementwise per parameter; backend/cpu/kernels_optim.cpp).
#pragma once

#include "passes/pass.h"

namespace kiln {

/// Statistics: updates_split (multi-tensor nodes replaced), update_nodes
/// (per-parameter nodes made), kept_multi_tensor (not split because the
/// scalars depend on the gradients).
Result<PassResult> runSplitUpdates(Graph& g, PassContext& ctx);

}  // namespace kiln
