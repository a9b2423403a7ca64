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
  std::string nccl_id;
  /// The memory_plan pass's plan (PassContext::memory_plan): run as it is
  /// when made for this graph under the backend's memoryRules.
  std::shared_ptr<const MemoryPlan> plan;
};

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
