// The pass interface: a pass rewrites a Graph in place and says whether it
// changed anything. Options a pass needs travel in the PassContext. (The
// PassManager with its pipelines, dumps and timing builds on this.)
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/ir.h"
#include <memory>

#include "core/memory_rules.h"
#include "core/result.h"
#include "passes/training_options.h"

namespace kiln {

struct MemoryPlan;  // passes/memory_plan.h

/// What the data_parallel pass decided under ZeRO-1, for the optimizer pass:
/// every communicated parameter, in the order its gradient was bucketed,
/// with the rank that owns it (passes/data_parallel.h).
struct ZeroShardPlan {
  std::vector<std::pair<std::string, int>> owners;
};

struct PassContext {
  /// Loss, optimizer and what to train; read by the training passes.
  TrainingOptions training;
  /// How the target's kernels use memory (views, writes in place): the
  /// device's rules (backend/kernel_memory_rules.h; TrainingSession sets
  /// them), so the passes that count memory (the peak after each pass,
  /// remat, schedule, memory_plan) count what the executor will run.
  /// Default: PyTorch's rules.
  MemoryRules memory;
  /// Set by the memory_plan pass: its plan of the final graph, which the
  /// executor runs when it runs nodes one at a time (the graph must not
  /// change after the pass).
  std::shared_ptr<const MemoryPlan> memory_plan;
  /// Set by data_parallel with training.data_parallel.zero_stage 1; read by
  /// the optimizer pass, which updates only this rank's parameters and
  /// all-gathers the rest.
  std::optional<ZeroShardPlan> zero_plan;
  /// The target has kernels for the ops only the CPU backend runs so far
  /// (`attention`, channels-last convolutions, cross-entropy reading
  /// low-precision logits); TrainingSession clears it for CUDA. The passes
  /// that create them (fuse_attention, channels_last, fuse's loss-cast fold)
  /// act only when set.
  bool cpu_only_ops = true;
};

struct PassResult {
  bool changed = false;
  /// Counters worth reporting ("nodes_added": 412, ...).
  std::map<std::string, double> statistics;
};

/// The result of a pass that only removes nodes: changed when it removed
/// any, statistic nodes_removed.
inline PassResult nodesRemoved(size_t removed) {
  return {removed > 0, {{"nodes_removed", static_cast<double>(removed)}}};
}

}  // namespace kiln
