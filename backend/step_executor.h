// What every executor of a compiled step (the CPU executor, the CUDA
// plugin's runner) tells its session and the front ends, so that reports,
// profiles and the training loop ask one interface instead of branching on
// which executor a session has: the kernel bound to each node, the memory
// plan it runs, where it runs, the nodes' measured times, and how nodes are
// grouped into stages. StepRunner adds how the training session feeds and
// runs a step, the same way on every device: the state uploaded once, a
// batch staged per step, the step run, results read back by name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/kernel_selection.h"
#include "core/result.h"
#include "core/tensor.h"
#include "passes/memory_plan.h"

namespace kiln {

class TraceRecorder;

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

/// Runs a training step on one device: the CPU (backend/cpu/cpu_step_runner.h)
/// or the CUDA plugin's (backend/device_step.h). The runner holds the state
/// between steps; the session reads it back only when asked.
class StepRunner : public StepExecutor {
 public:
  /// Take a persistent input (weights, optimizer state). A runner may share
  /// `t` (the CPU: updated in place once nobody else holds it) or copy it
  /// (a device upload, which synchronizes).
  virtual Status setState(const std::string& name, const Tensor& t) = 0;
  /// The per-step inputs (batch, learning rate) of the next run.
  virtual Status setBatch(const TensorMap& batch) = 0;
  /// The index of the next run: random ops draw from (seed, run index, node
  /// index), so a resumed run draws what one that never stopped would.
  /// Runs count up from it.
  virtual Status setRunIndex(uint64_t index) = 0;
  /// One step (a device enqueues it; the host does not wait).
  virtual Status run() = 0;
  /// An output of the last run or a state input, by name (a device
  /// synchronizes and copies; the CPU shares the tensor).
  virtual Result<Tensor> read(const std::string& name) = 0;
  /// Record a trace slice per node of the following runs (kiln train
  /// --trace); runners that cannot ignore it.
  virtual void setTrace(TraceRecorder*) {}
};

}  // namespace kiln
