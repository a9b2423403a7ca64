// remat: rematerialization under a memory budget.
//
// What it does: while the estimated peak of the step (core/graph_cost.h,
// updates in place) is over PassContext::training.memory_budget, it takes
// the intermediates alive at the peak node but not read there (activations
// kept for the backward), and for each works out how to compute it again
// right before its first reader after the peak: its producer, and the
// producers of those of its inputs that are not alive then anyway (a few
// levels deep; random and side-effecting ops never), or reads a copy of
// such an input remat already made after the peak. It applies the
// candidate that frees the most bytes per estimated microsecond of
// recompute (RAF's greedy heuristic, with time instead of flops), keeps it
// if the peak (then the area under the timeline) went down, else undoes
// it, and goes on at the new peak. Recomputation is the same kernels on the
// same inputs, so the values are bit for bit the same. Peaks count
// elementwise results written in place (core/memory_rules.h: the target's rules).
// If the budget cannot be met, the error gives the smallest peak reached,
// what the graph inputs (weights, optimizer state, batch) alone take, and
// what the peak node itself reads and writes.
//
// Needs: the final node set in its final order (after schedule). Does
// nothing without a budget or when the peak is within it.
#pragma once

#include "passes/pass.h"

namespace kiln {

/// Statistics: budget, peak_before, peak_after (bytes), values_recomputed,
/// nodes_added, flops_added.
Result<PassResult> runRemat(Graph& g, PassContext& ctx);

}  // namespace kiln
