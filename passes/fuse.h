// The fuse pass: elementwise chains become one fused_elementwise node, or
// one fused_reduction node when a sum or mean ends the chain.
#pragma once

#include <set>
#include <string>

#include "passes/pass.h"

namespace kiln {

/// Ops the fuse pass may put into a fused_elementwise body. Every backend
/// that runs fused_elementwise must implement all of them (a unit test
/// checks the CPU kernel does).
const std::set<Op>& fusibleOps();

/// The fuse pass (see passes/fuse.cpp). Statistics: groups, nodes_fused,
/// reductions (groups ending in a sum/mean), epilogues (GEMM + relu, and
/// loss casts folded), grad_casts (bf16 gradients AdamW reads itself),
/// bytes_saved (intermediate tensors no longer written and read back).
Result<PassResult> runFuse(Graph& g, PassContext& ctx);

}  // namespace kiln
