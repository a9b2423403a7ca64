// schedule: orders the training step for a low memory peak.
//
// What it does: list scheduling over the data dependences. Of the nodes
// whose inputs are ready, it runs next the one that frees the most: a node
// whose new buffers are no larger than the buffers it is the last to read
// (an optimizer update right after its gradient, a backward op consuming
// the activation it was kept for); when no ready node frees anything, the
// one earliest in the current order (the importer's and autodiff's order,
// which keeps the forward as written and the backward in reverse). So
// backward nodes and per-parameter updates (split_updates) run as early as
// their inputs allow and buffers die as early as possible.
// A collective (data_parallel's allreduce of a gradient bucket) runs as
// soon as its inputs are ready, whatever it frees, and a node that reads a
// collective's result only when no other node is ready, so the
// communication overlaps the rest of the backward. Collectives keep their
// relative order: every rank must issue them in the same order, and under
// ZeRO-1 the ranks' graphs (and so their ready lists) differ.
// An update that may write over the state it replaces (an optimizer update,
// a BatchNorm running statistic) waits until every other reader of that
// state has run, so writing in place stays possible.
// Views and writes in place are the target's (core/memory_rules.h). The new
// order is kept only when its peak of live bytes (estimatePeakBytes under
// the same rules) is lower than the current order's.
//
// Needs: a verified graph. Guarantees: the same nodes computing the same
// values (only their order changes); the estimated peak does not grow.
#pragma once

#include "passes/pass.h"

namespace kiln {

/// Statistics: peak_before, peak_after (bytes), nodes_moved.
Result<PassResult> runSchedule(Graph& g, PassContext& ctx);

}  // namespace kiln
