// The CUDA executor: runs a step graph on one GPU with the kernels the CUDA
// registry selects (cuda_kernel.h), without the host waiting inside a step.
//
// Memory: one device arena laid out by the memory plan (passes/memory_plan.h,
// with the views and in-place writes the bound kernels really make) holds
// every intermediate; the graph's persistent inputs (parameters, buffers,
// optimizer state) have buffers of their own that updates are written into
// (in place when the update kernel allows it, else by a device copy at the
// end of the step); per-step inputs (the batch, the learning rate) and the
// returned values have fixed buffers too. Every address is fixed when the
// executor is created, so no step allocates and the whole step can be
// captured once into a CUDA graph and replayed.
//
// Collectives (data parallel, cuda_collectives.h): each packs its inputs
// into a staging buffer of its own on the compute stream, then exchanges
// them through NCCL on a communication stream while the compute stream goes
// on; the compute stream waits for it (an event) just before the first
// kernel that reads one of its outputs, and for all of them at the end of
// the step, so the capture joins the two streams again.
//
// Streams: the step runs on a compute stream; setBatch() copies the next
// batch host -> pinned staging -> device on a copy stream while the current
// step runs, and the compute stream waits on an event before taking it
// (a device-to-device copy into the buffers the captured graph reads).
//
// The first run() enqueues node by node (libraries pick their algorithms,
// lazy module loading happens); the second is captured into a CUDA graph
// (cudaStreamCaptureModeGlobal: any synchronizing call would fail the
// capture) and every later run replays it. Reading an output (the loss) is
// the only synchronization; data faults flagged by kernels are reported
// there, naming the node.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_kernel.h"
#include "backend/kernel_selection.h"
#include "core/result.h"
#include "core/tensor.h"
#include "passes/memory_plan.h"

namespace kiln::cuda {

struct Libraries;

struct CudaExecutorOptions {
  uint64_t seed = 0;  ///< random ops draw from (seed, run index, node index) as on the CPU
  int device = 0;     ///< CUDA device ordinal
  /// Dialects (cuda, cublas, cublaslt, cudnn, nvrtc), autotuning (timed by
  /// cuda_node_runner.h), or a compiled plan's choices.
  KernelSelection kernels;
  bool cuda_graph = true;  ///< capture the step on the second run and replay it
  /// Data parallel: the ranks' NCCL communicator (nullptr: one process,
  /// collectives are copies on the compute stream). With one, collectives
  /// run on a communication stream.
  std::shared_ptr<NcclCommunicator> nccl;
  /// The memory_plan pass's plan of this graph, run as it is when it was
  /// made under cudaMemoryRules for this graph (reusablePlan); else planned here.
  std::shared_ptr<const MemoryPlan> plan;
};

class CudaExecutor {
 public:
  static Result<std::unique_ptr<CudaExecutor>> create(const Graph& graph, CudaExecutorOptions options = {});
  ~CudaExecutor();
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;

  /// Upload a persistent input (parameter, buffer, optimizer state) once;
  /// synchronizes (set-up, not a step). Unset optimizer state starts at zero.
  Status setState(const std::string& name, const Tensor& t);
  /// Stage the per-step inputs (data, scalars such as the learning rate) of
  /// the next run: host -> pinned -> device on the copy stream, overlapping
  /// a running step. Waits only if the previous staging has not been
  /// consumed by a run yet.
  Status setBatch(const TensorMap& batch);
  /// Enqueue one step (or replay the captured graph). No host sync.
  Status run();
  /// The next run draws its random numbers as run `index` (seed + index *
  /// golden ratio, as the CPU executor): a resumed run continues the
  /// sequence. Synchronizes (set-up, not a step).
  Status setRunIndex(uint64_t index);
  /// Synchronize and read an output by name (loss, metrics) or a state input
  /// by name (a parameter after the updates). Reports data faults.
  Result<Tensor> read(const std::string& name);

  const std::vector<KernelChoice>& kernelChoices() const { return choices_; }
  const MemoryPlan& memoryPlan() const { return *plan_; }
  /// Bytes of device memory the executor allocated (arena, state, I/O, workspace).
  uint64_t deviceBytes() const { return device_bytes_; }
  bool graphCaptured() const { return graph_exec_ != nullptr; }
  uint64_t runs() const { return runs_; }
  /// Time every node of the following runs (`kiln bench --profile`): each
  /// run enqueues node by node with an event before every node (the
  /// captured graph is not replayed meanwhile) and waits for its end, so
  /// profiled runs synchronize. Off: replays resume, nodeMillis() empties.
  Status setProfiling(bool on);
  /// Device milliseconds of each node (in kernelChoices() order) over the
  /// runs since profiling was switched on; a multi-tensor optimizer launch
  /// counts on its first node.
  const std::vector<double>& nodeMillis() const { return node_ms_; }

 private:
  CudaExecutor() = default;
  Status bind();
  void enqueueStep();
  void checkFaults();

  const Graph* graph_ = nullptr;
  CudaExecutorOptions options_;
  std::vector<const Node*> nodes_;
  std::vector<const CudaKernelDef*> kernels_;
  std::vector<KernelChoice> choices_;
  std::shared_ptr<const MemoryPlan> plan_;

  std::unique_ptr<Libraries> libs_;
  cudaStream_t compute_ = nullptr, copy_ = nullptr;
  cudaStream_t comm_ = nullptr;  ///< collectives, with a communicator
  /// Per collective node (by index), when it runs on comm_: its staging
  /// buffer, the event after its packing, the event after its outputs.
  struct Collective {
    void* staging = nullptr;
    cudaEvent_t packed = nullptr, done = nullptr;
  };
  std::map<size_t, Collective> collectives_;
  /// Per node: the collectives (node indices) whose outputs it reads.
  std::vector<std::vector<size_t>> waits_;
  cudaEvent_t batch_ready_ = nullptr, batch_taken_ = nullptr;
  cudaGraphExec_t graph_exec_ = nullptr;

  std::vector<void*> allocations_;  ///< everything to free
  uint64_t device_bytes_ = 0;
  unsigned char* arena_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  uint64_t* run_seed_ = nullptr;       ///< device
  uint64_t* run_seed_host_ = nullptr;  ///< pinned
  int* error_flag_ = nullptr;          ///< device

  std::unordered_map<const Value*, void*> addr_;  ///< every value's device address
  /// Per-step inputs: name -> (device buffer the graph reads, device staging, pinned staging, bytes).
  struct Staged {
    const Value* value;
    void* device;
    void* next;
    void* pinned;
    size_t bytes;
    bool set = false;
  };
  std::map<std::string, Staged> staged_;
  bool batch_pending_ = false;
  /// Updates not written in place: (from, to, bytes) device copies at the end of a step.
  struct Copy {
    void* from;
    void* to;
    size_t bytes;
  };
  std::vector<Copy> state_copies_;
  /// Runs of consecutive optimizer updates enqueued as one multi-tensor
  /// launch (kernels_optim.h): first node index -> end index.
  std::map<size_t, size_t> multi_tensor_runs_;
  /// Per node: its inputs and outputs as device tensors (fixed addresses).
  std::vector<std::vector<DeviceTensor>> ins_, outs_;
  uint64_t runs_ = 0;
  /// Profiling: one event per node (recorded before it) and one after the
  /// step; the nodes marked in the current run, in order.
  bool profiling_ = false;
  std::vector<cudaEvent_t> node_events_;
  std::vector<size_t> marked_;
  std::vector<double> node_ms_;
};

}  // namespace kiln::cuda
