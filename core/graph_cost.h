// Whole-graph cost estimates from the op table: the work a graph does
// (flops) and how much memory running it needs at its peak. Both are
// static, computed from types alone, and cheap enough to run after every
// pass (the PassManager records them in each trace entry).
#pragma once

#include <cstdint>

#include "core/ir.h"
#include "core/memory_rules.h"

namespace kiln {

/// Sum over the nodes of the op table's cost flops (core/op_table.h,
/// nodeCost): a multiply-add counts 2; data movement counts 0.
double graphFlops(const Graph& g);

/// Whether `n`'s output may be a view of its first input's storage instead
/// of a new buffer (reshape, permute, expand, slice, select, split: the ops
/// PyTorch implements as strided views). Other kView-trait ops (cat, pad,
/// repeat, flip, ...) move data into a new buffer and count.
bool mayAliasInput(const Node& n);

/// Estimated peak memory in bytes of running the nodes in graph order on a
/// target with `rules` (by default PyTorch's):
///  - every graph input (parameters, optimizer state, the batch) is live for
///    the whole step;
///  - a node's outputs are allocated when it runs, while its inputs are
///    still live; an intermediate is freed after its last use, a graph
///    output stays to the end, an output nobody reads is freed at once;
///  - outputs of the rules' views take no memory of their own: they keep
///    their source buffer alive until their own last use;
///  - an update whose node reads the state it replaces last is written over
///    that state, and an elementwise result over a same-typed input it reads
///    last, where the rules allow (analyzeStepLiveness).
/// It equals the peak_bytes of the memory plan of the same graph and rules
/// (passes/memory_plan.h) when nodes run one at a time. Not modelled: kernel
/// workspaces, allocator rounding, arena fragmentation.
uint64_t estimatePeakBytes(const Graph& g, const MemoryRules& rules = {});

}  // namespace kiln
