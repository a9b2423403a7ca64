// memory_plan: where each intermediate of a step lives in one arena.
//
// What it does: takes the buffer liveness of the graph in its node order
// (core/liveness.h) and gives every buffer the step makes and drops (not
// graph inputs, not what the step returns) an offset in one arena, so that
// two buffers alive at the same node never overlap. Offsets are assigned
// greedily by size, largest first, each at the lowest offset that fits
// between the buffers already placed whose lifetimes overlap its own (the
// "greedy by size" heuristic of TFLite's and RAF's planners); the arena
// comes out close to its lower bound, the most bytes ever live at once.
// Buffers are 64-byte aligned. Values written in place share a buffer:
// optimizer updates over their state, and elementwise results over an input
// they read last (elementwiseInPlace), as PyTorch's relu_/add_ would. Which
// outputs are views and which writes in place happen are the target's
// memory rules (core/memory_rules.h, PassContext::memory): the same ones
// the executor binds its kernels under, so the pass's plan is the one the
// executor runs (PassContext::memory_plan). An executor that runs
// independent nodes side by side plans again with each buffer alive for
// its nodes' whole stages (`stages` below), under the same rules.
//
// Needs: a verified graph in the order it will run, and no pass after it
// (the plan points at the graph's values). Guarantees: a plan checkPlan()
// accepts; the graph is not changed. The plan also carries the memory
// timeline (live bytes at every node) that the report and `kiln memory`
// show.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/liveness.h"
#include "core/result.h"
#include "passes/pass.h"

namespace kiln {

constexpr uint64_t kArenaAlignment = 64;

struct MemoryPlan {
  std::string target = "pytorch";  ///< whose memory rules (MemoryRules::target)
  bool widened_to_stages = false;  ///< planned for nodes running side by side
  /// "memory_plan pass" (PassContext::memory_plan) or "executor" (planned
  /// when binding: side-by-side stages, a cached step, a pipeline without
  /// the pass).
  std::string made_by = "executor";
  Liveness liveness;
  /// Per buffer of liveness.buffers: its offset in the arena, or -1 when the
  /// step does not place it (graph inputs, returned buffers).
  std::vector<int64_t> offsets;
  uint64_t arena_bytes = 0;        ///< size of the arena
  uint64_t arena_lower_bound = 0;  ///< most planned bytes (aligned) alive at one node
  uint64_t unshared_bytes = 0;     ///< planned bytes with a buffer of their own each (no reuse)
  uint64_t input_bytes = 0;        ///< graph inputs: weights, optimizer state, the batch
  uint64_t returned_bytes = 0;     ///< buffers the step returns (updates, gradients, loss)
  std::vector<uint64_t> timeline;  ///< live bytes while each node runs (liveBytesTimeline)
  uint64_t peak_bytes = 0;         ///< max of timeline (inputs only when there are no nodes)
  /// The peak of the same order run op by op with a fresh buffer per tensor,
  /// freed after its last reader, and no update written in place: what the
  /// plan is measured against.
  uint64_t op_by_op_peak_bytes = 0;
  size_t peak_node = 0;  ///< index into liveness.order of the first peak
  size_t updates_in_place = 0;      ///< updates written over their state (rules' plans)
  size_t elementwise_in_place = 0;  ///< elementwise results written over a dying input (rules' plans)
};

/// The arena size a buffer of `bytes` takes.
inline uint64_t arenaSize(uint64_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

/// Runs of consecutive nodes, [first, end) indices in node order, whose
/// nodes an executor runs at the same time (backend/cpu/node_stages.h).
using NodeStages = std::vector<std::pair<size_t, size_t>>;

/// Plans `g` run in its node order (views and in-place updates as
/// analyzeLiveness takes them). With `stages`, a buffer made or last read by
/// a node of a stage is alive for that whole stage, so nodes that run
/// together never share arena bytes.
MemoryPlan planMemory(const Graph& g, const ViewPredicate& is_view = {}, const InPlaceUpdates* in_place = nullptr,
                      const NodeStages* stages = nullptr);

/// Plans `g` under a target's memory rules: its views, and every write in
/// place they and the order allow (analyzeStepLiveness).
MemoryPlan planMemory(const Graph& g, const MemoryRules& rules, const NodeStages* stages = nullptr);
/// The same from the liveness already analysed under rules of `target`.
MemoryPlan planMemory(const StepLiveness& step, const std::string& target, const NodeStages* stages = nullptr);

/// `plan` when an executor can run it as it is: made for `g` (same nodes in
/// the same order; the pass manager drops the plan when a later pass
/// changes the graph) under rules of the same target, with `stages` running
/// one node at a time. Else nullptr: the
/// executor plans again (planMemory with `rules` and `stages`).
std::shared_ptr<const MemoryPlan> reusablePlan(std::shared_ptr<const MemoryPlan> plan, const Graph& g,
                                               const MemoryRules& rules, const NodeStages& stages);

/// Checks that no two buffers alive at one node overlap in the arena and that
/// every placed buffer is aligned and inside it; the error names the pair.
Status checkPlan(const MemoryPlan& plan);

/// The registered pass: plans `g` under ctx.memory, keeps the plan in
/// ctx.memory_plan and reports its numbers; the graph is not changed.
Result<PassResult> runMemoryPlan(Graph& g, PassContext& ctx);

/// The buffers alive while node `at` runs, largest first.
std::vector<size_t> buffersLiveAt(const MemoryPlan& plan, size_t at);

}  // namespace kiln
