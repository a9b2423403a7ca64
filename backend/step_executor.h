// What every executor of a compiled step (the CPU executor, the CUDA
// plugin's runner) tells its session and the front ends, so that reports,
// profiles and the training loop ask one interface instead of branching on
// which executor a session has: the kernel bound to each node, the memory
// plan it runs, where it runs, the nodes' measured times, and how nodes are
// grouped into stages. How a step is fed and run differs by device (a
// CPU run takes its inputs; a device stages them and enqueues), and stays
// with each executor.
#pragma once

#include <string>
#include <vector>

#include "backend/kernel_selection.h"
#include "core/result.h"
#include "passes/memory_plan.h"

namespace kiln {

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  /// The kernel bound to each node, in node order.
  virtual const std::vector<KernelChoice>& kernelChoices() const = 0;
  /// The plan the runs follow.
  virtual const MemoryPlan& memoryPlan() const = 0;
  /// "cpu", or the device: "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)".
  virtual std::string deviceName() const = 0;
  /// Time every node of the following runs; nodeMillis() then holds each
  /// node's time summed over them, indexed as kernelChoices(). Off: empty.
  virtual Status setProfiling(bool on) = 0;
  virtual const std::vector<double>& nodeMillis() const = 0;
  /// Whether profiled runs run differently enough to be kept apart from
  /// measured ones (a device enqueues them node by node with events instead
  /// of its captured graph, and waits for each).
  virtual bool profilingChangesRuns() const { return false; }
  /// The stages the runs follow ([first, end) node indices; a stage of more
  /// than one node runs them at the same time); empty: one node at a time.
  virtual const NodeStages& stages() const {
    static const NodeStages kNone;
    return kNone;
  }
  /// Host threads the runs use; 0 where the device runs them.
  virtual int threads() const { return 0; }
};

}  // namespace kiln
