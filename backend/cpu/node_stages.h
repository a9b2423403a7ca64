// Which nodes of a step the CPU executor runs at the same time.
//
// A stage is a run of consecutive nodes (in the step's order) that do not
// depend on each other: the executor runs a stage's nodes side by side on
// the one OpenMP pool, each on one thread, and a stage of one node alone
// with every thread inside the op. Only small nodes share a stage: a big op
// already keeps every core busy by itself, and small ones are where a step
// of many little tensors (per-parameter optimizer updates, bias gradients,
// layer norms of a narrow model) leaves cores idle.
//
// A node joins the current stage when
//  - its kernel may run beside others (KernelDef::runs_beside_others: same
//    result on one thread as on many, no unlocked state) and it is small
//    (kSmallNodeFlops, kSmallNodeElements), like every node already there;
//  - it reads no output of the stage's nodes;
//  - it writes no buffer the stage reads and reads none the stage writes,
//    where an optimizer update written in place writes the graph input it
//    replaces and reading a view reads the buffer underneath;
//  - the stage holds fewer than kMaxStageNodes.
// The memory plan then keeps every buffer a stage touches alive for the
// whole stage (planMemory's spans), so no two nodes running together share
// arena bytes. Results are those of running the nodes one by one: each
// node's kernel computes the same on one thread as on all of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_loops.h"
#include "backend/kernel.h"
#include "core/ir.h"
#include "core/liveness.h"

namespace kiln {

/// Small: what runs on one thread anyway when it runs alone, so a stage
/// never takes a node's own parallel loops away from it. OpenBLAS runs a
/// GEMM this small on the caller's thread; the CPU kernels' own parallel
/// loops start at kOmpMinWork (cpu_loops.h).
constexpr double kSmallNodeFlops = 1 << 19;
constexpr int64_t kSmallNodeElements = cpu::kOmpMinWork;
constexpr size_t kMaxStageNodes = 32;
/// One thread's speed for the estimate below (deliberately low: small
/// kernels run far from peak).
constexpr double kFlopsPerMicro = 2000, kGemmFlopsPerMicro = 30000, kBytesPerMicro = 4000;
/// A stage runs side by side only when two of its nodes are estimated at
/// least this long: waking a sleeping pool thread costs tens of microseconds.
constexpr double kMinBesideMicros = 40;

/// Estimated microseconds of `n` on one thread, from its flops and bytes.
double estimatedMicros(const Node& n);

/// [first, end) node indices of each stage, covering `l.order` in order.
/// `l` is the liveness with the views the bound kernels make (which buffer
/// each value reads); `kernels[i]` runs `l.order[i]`; `donors[i][k]` is the
/// value whose buffer output k of node i is written into (a graph input it
/// updates, an input an elementwise kernel reads last; nullptr: none). A
/// stage is kept only when two of its nodes are estimated at
/// `min_beside_micros` or more; else its nodes run one by one (stages of one).
std::vector<std::pair<size_t, size_t>> groupIndependentNodes(const Liveness& l,
                                                             const std::vector<const KernelDef*>& kernels,
                                                             const std::vector<std::vector<const Value*>>& donors,
                                                             double min_beside_micros = kMinBesideMicros);

}  // namespace kiln
