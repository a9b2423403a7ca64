// The channels_last pass: convolution chains (with their norms, activations,
// skip concatenations and upsampling) run on NHWC tensors, so oneDNN's
// convolutions read and write them in place instead of reordering every
// activation into their layout and back.
#pragma once

#include "passes/pass.h"

namespace kiln {

/// The channels_last pass (see passes/channels_last.cpp). Statistics:
/// convolutions, batch_norms, group_norms and elementwise_moved (nodes moved
/// to NHWC), transposes (the layout copies left in the graph, at its NCHW
/// edges) and permutes_merged (pairs merged, most into nothing). Does
/// nothing when PassContext::cpu_only_ops is false.
Result<PassResult> runChannelsLast(Graph& g, PassContext& ctx);

}  // namespace kiln
