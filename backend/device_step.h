// A step graph run on an accelerator, behind an interface the rest of Kiln
// uses without CUDA headers or libraries: the CUDA backend lives in a plugin,
// libkiln_cuda.so (backend/cuda/cuda_plugin.cpp), that the kiln executable
// loads on the first `--device cuda`, so commands that never touch a GPU do
// not pay for loading cuBLAS, cuBLASLt and cuDNN at start-up (the libtorch
// plugin's reason too, backend/aten/torch_plugin.h).
//
// The runner keeps the step's persistent state (parameters, buffers,
// optimizer state) on the device between steps; the host sees it only when
// it reads it.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/kernel_selection.h"
#include "backend/step_executor.h"
#include "core/plugin_loader.h"
#include "core/result.h"
#include "core/tensor.h"
#include "passes/memory_plan.h"

namespace kiln {

struct DeviceRunnerOptions {
  uint64_t seed = 0;
  KernelSelection kernels;
  /// Data parallel: this rank of world_size; with more than one, the ranks
  /// meet through NCCL with `nccl_id` (DeviceBackend::ncclUniqueId, made by
  /// rank 0 and passed to the others), and the runner takes GPU
  /// `local_rank` modulo the devices it sees.
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;  ///< the ranks on this machine: at most one per GPU
  std::string nccl_id;
  /// NCCL's initialisation and the step's collectives give up after these,
  /// aborting the communicator (a rank that died or hangs would otherwise
  /// stall the others' GPUs for ever).
  std::chrono::milliseconds nccl_init_timeout{std::chrono::minutes(10)};
  std::chrono::milliseconds nccl_timeout{std::chrono::minutes(30)};
  /// The memory_plan pass's plan (PassContext::memory_plan): run as it is
  /// when made for this graph under the backend's memoryRules.
  std::shared_ptr<const MemoryPlan> plan;
};

/// The GPU that the rank `local_rank` of `local_world_size` on this
/// machine drives: its own, one GPU per rank. More ranks than GPUs is an
/// error (NCCL needs a GPU per rank), as is a machine without any.
inline Result<int> gpuForLocalRank(int local_rank, int local_world_size, int device_count) {
  if (device_count < 1) return Error{"--device cuda: no CUDA device on this machine"};
  if (local_world_size > device_count)
    return Error{"--device cuda: " + std::to_string(local_world_size) + " ranks on this machine but " +
                 std::to_string(device_count) + " GPU" + (device_count == 1 ? "" : "s") +
                 " (NCCL needs one GPU per rank: --nproc at most " + std::to_string(device_count) +
                 ", or CUDA_VISIBLE_DEVICES)"};
  if (local_rank < 0 || local_rank >= local_world_size)
    return Error{"--device cuda: local rank " + std::to_string(local_rank) + " of " +
                 std::to_string(local_world_size)};
  return local_rank;
}

class DeviceStepRunner : public StepRunner {
 public:
  /// Profiling (`kiln bench --profile`): while on, each run() enqueues the
  /// step node by node (no captured graph) with an event before every node,
  /// and waits for the step's end; nodeMillis() then holds each node's
  /// device time. Off: the captured graph again.
  bool profilingChangesRuns() const override { return true; }
};

/// What the CUDA plugin offers.
struct DeviceBackend {
  /// The dialects its kernels come in (for --dialects).
  std::vector<std::string> (*dialects)();
  /// What compiled plans depend on (compile-cache key): device name, compute
  /// capability, CUDA runtime and library versions; "none" without a device.
  std::string (*target)();
  /// Bind kernels and lay out device memory for `graph`, which must outlive
  /// the runner. An Error when no device can run it.
  Result<std::unique_ptr<DeviceStepRunner>> (*create)(const Graph& graph, const DeviceRunnerOptions& options);
  /// A new NCCL unique id for DeviceRunnerOptions::nccl_id (rank 0 calls it).
  Result<std::string> (*ncclUniqueId)();
  /// Its memory rules (core/memory_rules.h) under a dialect selection: what
  /// the passes count memory with for this device.
  MemoryRules (*memoryRules)(const DialectOrder& order);
};

/// The CUDA backend, loaded on first use: an Error saying why when this
/// build has none or the plugin cannot be loaded.
Result<const DeviceBackend*> cudaBackend();

/// Where cudaBackend() looks for libkiln_cuda.so; nullopt in a build without CUDA.
std::optional<PluginSpec> cudaPluginSpec();

}  // namespace kiln

/// The plugin's entry point (extern "C", resolved with dlsym).
#define KILN_CUDA_PLUGIN_ENTRY "kiln_cuda_plugin_entry"
