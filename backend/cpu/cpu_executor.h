// Reference CPU executor: runs a Graph in its order with the kernels the
// registry selects. Intermediates live in one arena laid out by the memory
// plan (passes/memory_plan.h) under the CPU's memory rules
// (cpuMemoryRules: the views and writes in place its kernels make, the
// rules the passes counted with): the memory_plan pass's own plan when the
// nodes run one at a time, else the same planning with lifetimes widened to
// the stages. A steady-state run allocates no buffer for intermediates,
// only for what it returns and what kernels convert.
//
// Threads: one OpenMP pool does everything. A big node runs alone with the
// pool inside its kernel (OpenMP loops, oneDNN); runs of small independent
// nodes (node_stages.h) run side by side, one node per pool thread, with the
// parallel loops inside them single-threaded, so the pool is never asked for
// more threads than it has. Results are the same either way: every kernel
// that may run beside others computes the same on one thread as on many.
// One run at a time per executor: runs share the arena.
#pragma once

#include <exception>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cpu/cpu_autotune.h"
#include "backend/kernel.h"
#include "backend/step_executor.h"
#include "core/model.h"
#include "core/result.h"
#include "passes/memory_plan.h"

namespace kiln {
class TraceRecorder;
}

namespace kiln {

struct CpuExecutorOptions {
  uint64_t seed = 0;
  int num_threads = 0;  ///< 0: the library default (all cores)
  /// Run independent small nodes at the same time (node_stages.h); false:
  /// one node at a time, threads only inside ops.
  bool concurrent_nodes = true;
  /// Nodes estimated shorter than this do not make a stage worth waking the
  /// pool for (node_stages.h); < 0: kMinBesideMicros. Tests set 0 to run
  /// every independent run of small nodes side by side.
  double min_beside_micros = -1;
  /// Which kernels: dialects, autotuning, or a compiled plan's choices.
  KernelSelection kernels;
  /// The data-parallel run's collectives: collective nodes start on its
  /// communication thread and the run waits at their first reader
  /// (backend/comm/collective_engine.h). nullptr: one process.
  CollectiveEngine* collectives = nullptr;
  /// The memory_plan pass's plan of this graph (PassContext::memory_plan),
  /// run as it is when no stage runs nodes side by side and it was made
  /// for this graph under cpuMemoryRules; nullptr or otherwise: planned here.
  std::shared_ptr<const MemoryPlan> plan;
};

class CpuExecutor : public StepExecutor {
 public:
  /// Bind a kernel to every node; an error names each node without a kernel.
  static Result<CpuExecutor> create(const Graph& graph, CpuExecutorOptions options = {});
  /// Run once. `inputs` binds every graph input by name (data inputs and
  /// weights alike); returns the graph outputs in order. Inputs named in
  /// `donated` may be overwritten: an updates_in_place kernel (the
  /// optimizer) writes the graph output that replaces such an input (same
  /// name, a param/buffer/opt-state update) into the input's buffer, when it
  /// is the input's last reader. The caller must hold no other view of them
  /// that it still needs.
  Result<std::vector<Tensor>> run(const TensorMap& inputs, const std::set<std::string>& donated = {});
  /// Convenience: bind weights from the model and data inputs input0.. in order.
  Result<std::vector<Tensor>> runModel(const Model& model, const std::vector<Tensor>& data);

  const std::vector<KernelChoice>& kernelChoices() const override { return choices_; }
  std::string deviceName() const override { return "cpu"; }
  /// Random ops draw from (seed, run index, node index); the run index counts
  /// runs unless set here (training sets it to the step number so a resumed
  /// run draws the same numbers as one that never stopped).
  void setRunIndex(uint64_t index) { runs_ = index; }
  /// Record a trace slice per node of the following runs (kiln train
  /// --trace) while `trace` is recording; nullptr: off.
  void setTrace(TraceRecorder* trace) { trace_ = trace; }
  /// Time every node of the following runs (`kiln bench --profile`).
  Status setProfiling(bool on) override {
    node_ms_.assign(on ? nodes_.size() : 0, 0.0);
    return {};
  }
  /// Milliseconds spent in each node (in graph order) over the runs since
  /// profiling was switched on; empty when it is off.
  const std::vector<double>& nodeMillis() const override { return node_ms_; }
  const std::vector<const Node*>& nodes() const { return nodes_; }
  /// The plan the runs follow (arena offsets of the intermediates), as in
  /// the steady state where every update that may be written in place is.
  const MemoryPlan& memoryPlan() const override { return *plan_; }
  /// The stages the runs follow: [first, end) node indices, in order; a
  /// stage of more than one node runs its nodes at the same time.
  const NodeStages& stages() const override { return stages_; }
  /// Threads of the pool the runs use (the option, else all cores).
  int threads() const override;

 private:
  /// Fills donors_: which outputs may be written into which value's buffer
  /// (updates over the graph inputs they replace, see run(); elementwise
  /// results over an input they read last): the memory rules' writes in
  /// place (analyzeStepLiveness).
  void setDonors(const InPlaceUpdates& in_place);
  /// One node's inputs, outputs and error while its stage runs.
  struct NodeRun {
    std::vector<Tensor> ins, outs;
    std::exception_ptr error;
  };
  struct RunState;
  /// The tensor output `o` of node `i` is written into, if any (donors_), in this run.
  const Tensor* overwritten(size_t i, size_t o, const RunState& st) const;
  /// Gathers node i's inputs and binds its outputs to their planned slots.
  void bindNode(size_t i, RunState& st, NodeRun& r) const;
  /// Runs node i's kernel (timed and traced when asked); throws with the node named.
  void runKernel(size_t i, NodeRun& r, KernelContext& ctx);
  /// Waits for node i's collective; its error names the node.
  void awaitCollective(CollectiveEngine& comm, size_t i) const;
  /// Checks node i's outputs and puts them where its readers find them.
  void storeNode(size_t i, RunState& st, NodeRun& r) const;

  const Graph* graph_ = nullptr;
  CpuExecutorOptions options_;
  std::vector<const Node*> nodes_;
  std::vector<const KernelDef*> kernels_;
  std::vector<KernelChoice> choices_;
  uint64_t runs_ = 0;
  std::vector<double> node_ms_;
  TraceRecorder* trace_ = nullptr;
  std::shared_ptr<const MemoryPlan> plan_;
  std::vector<std::vector<int64_t>> out_offsets_;  ///< per node, per output: arena offset or -1
  /// Per node, per output: the value whose buffer it may be written into (a
  /// graph input it updates, or an input an elementwise kernel reads last).
  std::vector<std::vector<const Value*>> donors_;
  std::vector<std::vector<const Value*>> frees_after_;  ///< per node: intermediates it reads last
  std::shared_ptr<unsigned char[]> arena_;              ///< allocated at the first run
  std::unordered_map<const Node*, size_t> index_of_;    ///< node -> its index in nodes_
  NodeStages stages_;
};

}  // namespace kiln
