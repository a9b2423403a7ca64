// A training session: the step graph (forward + loss + backward + optimizer,
// built by passes/training_graph.h), the runner that runs it on its device
// (backend/step_executor.h StepRunner: the CPU's or the CUDA plugin's, fed
// the same way), and the training state (parameters, buffers, optimizer
// state) carried from one step to the next, which the runner holds.
//
// step() is sync-free: it stages the batch and the host-computed learning
// rate and runs the graph, which updates the state the runner holds,
// without reading any value back. The loss and metrics of the last step stay tensors until the
// caller asks for them (readLoss/readMetrics), which is the only point where
// a device backend would synchronize.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_executor.h"
#include "backend/cpu/cpu_step_runner.h"
#include "backend/device_step.h"
#include "backend/lr_schedule.h"
#include "core/model.h"
#include "passes/training_graph.h"

namespace kiln {

struct TrainingConfig {
  PassContext passes;  ///< loss, optimizer, frozen parameters, target type
  /// "cpu" (CpuExecutor) or "cuda" (the CUDA plugin's runner: state stays
  /// on the GPU between steps; backend/device_step.h).
  std::string device = "cpu";
  double lr = 1e-3;
  /// Muon's rate (--optimizer muon), under the same schedule as lr.
  double muon_lr = 0.02;
  LrSchedule schedule;
  uint64_t seed = 0;    ///< random ops (dropout) draw from (seed, step)
  int num_threads = 0;  ///< 0: all cores
  /// Run independent small nodes at the same time (CpuExecutorOptions).
  bool concurrent_nodes = true;
  double min_beside_micros = -1;  ///< CpuExecutorOptions::min_beside_micros
  /// Which kernels (--dialects, --autotune, a compiled plan's choices).
  KernelSelection kernels;
  /// Passes to build the graph with instead of the default pipeline.
  std::vector<const PassInfo*> pipeline;
  /// PassManager switches (IR printing, dumps, verification).
  PassManagerOptions pass_options = [] {
    PassManagerOptions o;
    o.verify_each = true;
    return o;
  }();
  /// Only compile and bind kernels (kiln compile, kiln memory): the session
  /// takes no weights and cannot step.
  bool compile_only = false;
  /// The data-parallel run this process is a rank of (kiln train --nproc):
  /// the step's collectives run on it, and the initial parameters and
  /// buffers are broadcast from rank 0. nullptr: one process.
  std::shared_ptr<CollectiveEngine> collectives;
  /// This rank among its machine's (LOCAL_RANK) and how many they are
  /// (LOCAL_WORLD_SIZE): which GPU it drives.
  int local_rank = 0;
  int local_world_size = 1;
  /// How long NCCL's initialisation and the step's collectives wait on a
  /// GPU before the communicator is aborted (CommOptions' rendezvous and
  /// collective timeouts).
  std::chrono::milliseconds rendezvous_timeout{std::chrono::minutes(10)};
  std::chrono::milliseconds collective_timeout{std::chrono::minutes(30)};
  /// How long the other ranks wait while rank 0 writes or reads a
  /// checkpoint (CommOptions::checkpoint_timeout), instead of a collective's
  /// timeout: a large model's checkpoint must not end the run.
  std::chrono::milliseconds checkpoint_timeout{std::chrono::hours(1)};
};

/// A step graph compiled earlier (the compile cache): the session binds it
/// instead of running the passes, and reports `trace` as its pass trace.
struct CompiledStep {
  Graph graph;
  std::vector<PassTraceEntry> trace;
};

class TrainingSession {
 public:
  /// Build the graph of `kind` for `model` and bind kernels. The session keeps
  /// its own copy of the weights; the optimizer state starts at zero.
  /// With `compiled`, its graph is taken as it is (no passes run).
  static Result<std::unique_ptr<TrainingSession>> create(const Model& model, TrainingConfig config,
                                                         TrainingGraphKind kind = TrainingGraphKind::Step,
                                                         CompiledStep* compiled = nullptr);

  /// The graph's Data inputs (input0.., target): what a batch must hold.
  std::vector<const Value*> batchInputs() const;
  /// Check a batch before a step: every Data input present with the right
  /// type; class-index targets within range. One-line errors naming `where`.
  Status checkBatch(const TensorMap& batch, const std::string& where) const;

  /// One training step (Gradients graphs: one forward/backward, no update).
  Status step(const TensorMap& batch);
  int64_t stepsDone() const { return steps_; }
  /// Learning rate the next step will use.
  double nextLr() const { return config_.schedule.at(config_.lr, steps_); }

  /// Loss of the last step (reading it is the sync point).
  Result<double> readLoss() const;
  /// Metrics of the last step by name (accuracy, grad_norm, ...).
  std::map<std::string, double> readMetrics() const;
  /// Gradients of the last step, keyed by every state_dict name of each
  /// parameter (Gradients graphs only).
  TensorMap gradients() const;

  /// Parameters and buffers keyed like PyTorch's state_dict(), tied
  /// parameters under each of their names.
  TensorMap stateDict() const;
  /// Optimizer state (step counter, moments) keyed by graph input name.
  TensorMap optimizerState() const;
  /// The model as this session holds it now, without its graph: parameters,
  /// buffers and constants by graph input name, the state_dict entries the
  /// graph does not use, the aliases. What a session of another step of the
  /// same model can be created from instead of importing the file again.
  Model currentWeights() const;

  /// Save / restore everything a resumed run needs (see backend/checkpoint.h).
  /// In a data-parallel run every rank calls saveCheckpoint and rank 0
  /// writes (ZeRO-1: after gathering every rank's optimizer state); every
  /// rank calls loadCheckpoint, rank 0 alone reads the files and sends them
  /// (the others need not see its disk), and each rank takes the state its
  /// graph holds. The others wait for rank 0's disk with
  /// TrainingConfig::checkpoint_timeout.
  /// `keep`: how many checkpoints `dir` keeps, the newest (--keep-checkpoints).
  Status saveCheckpoint(const std::string& dir, int keep = 1) const;
  Status loadCheckpoint(const std::string& dir);

  /// Carry the training on from `prev`, a session of the same model compiled
  /// with other options (a recipe's schedule point: more parameters frozen,
  /// another sequence length or image size): its parameters and buffers, the
  /// optimizer state of the parameters this graph still updates (a state
  /// `prev` has none of starts at zero), and its step count (the learning
  /// rate schedule and random ops go on from there).
  Status adoptState(const TrainingSession& prev);
  /// Replace the parameters and buffers by `state_dict`'s tensors of the same
  /// names and types (an evaluation session takes the training session's
  /// weights, or their moving average, before each evaluation).
  Status setWeights(const TensorMap& state_dict);

  const Graph& graph() const { return *graph_; }
  /// Trace every node the following steps run (kiln train --trace).
  void setTrace(TraceRecorder* trace) { runner_->setTrace(trace); }
  const std::vector<PassTraceEntry>& passTrace() const { return trace_; }
  /// The kernel bound to each node of graph(), in node order (for reports).
  const std::vector<KernelChoice>& kernelChoices() const { return executor().kernelChoices(); }
  /// The memory plan the executor runs (its arena).
  const MemoryPlan& memoryPlan() const { return executor().memoryPlan(); }
  /// The executor of the step, whichever device it runs on: its kernels,
  /// plan, device name, profiling and stages.
  const StepExecutor& executor() const { return *runner_; }
  StepExecutor& executor() { return *runner_; }
  const TrainingConfig& config() const { return config_; }
  /// Tied parameters: extra state_dict key -> the input that holds it (Model::aliases).
  const std::map<std::string, std::string>& aliases() const { return aliases_; }
  /// The CPU executor (its nodes and stages, for tests); nullptr when the
  /// session runs on a device.
  CpuExecutor* cpuExecutor() { return cpu_ ? &cpu_->executor() : nullptr; }
  const CpuExecutor* cpuExecutor() const { return cpu_ ? &cpu_->executor() : nullptr; }

 private:
  /// This process's checkpoint write (rank 0's, or a single process's).
  Status writeOwnCheckpoint(const std::string& dir, int keep, TensorMap& opt) const;
  TrainingSession() = default;
  /// The optimizer state for `v`, zeros before the first step writes it.
  Tensor optStateOrZeros(const Value* v) const;
  /// The state the runner holds, read into state_ when steps ran since the
  /// last read (the session's copy is then stale).
  void pullState() const;
  /// Data-parallel runs: the parameters and buffers of rank 0 on every rank.
  Status broadcastState();
  /// What every rank of a data-parallel run must agree on: the model's
  /// structural hash and its parameters' and buffers' names and types, one
  /// per line (checked against rank 0's before the weights are broadcast).
  std::string model_fingerprint_;
  /// state_ handed to the runner before the next step (after create and
  /// loadCheckpoint), with the step number as its run index.
  Status pushState();
  /// Output `i` of the last step, from the runner.
  Result<Tensor> lastOutput(size_t i) const;
  std::unique_ptr<Graph> graph_;
  /// Runs the steps: the CPU's (cpu_, the same object) or the CUDA plugin's.
  std::unique_ptr<StepRunner> runner_;
  CpuStepRunner* cpu_ = nullptr;
  mutable bool host_stale_ = false;  ///< steps ran since state_ was read back from the runner
  bool runner_stale_ = true;         ///< state_ changed since it was handed to the runner
  bool ran_ = false;                 ///< a step ran (its outputs can be read)
  TrainingConfig config_;
  TrainingGraphKind kind_ = TrainingGraphKind::Step;
  std::map<std::string, std::string> aliases_;  ///< tied parameters (Model::aliases)
  TensorMap untouched_;                         ///< state_dict entries the graph does not use
  /// Every graph input that is not Data or Scalar, by name (optimizer state
  /// only once a step has written it): before the first step and after a
  /// resume, what the runner will be given; between steps, what was read
  /// back from it (emptied at each step).
  mutable TensorMap state_;
  int64_t steps_ = 0;
  std::vector<PassTraceEntry> trace_;
};

}  // namespace kiln
