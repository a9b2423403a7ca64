// Run one node on the GPU, for the kernel tests and for autotuning: upload
// the inputs, allocate the outputs and the kernel's workspace, enqueue the
// kernel on a stream of its own, synchronize and download. Slow (it
// allocates and synchronizes each call): never on a training step's path.
#pragma once

#include <span>
#include <vector>

#include "backend/cuda/cuda_kernel.h"
#include "core/result.h"
#include "core/tensor.h"

namespace kiln::cuda {

/// Whether a CUDA device can run kernels here; when not, `why` says why
/// (no driver, no device), for visible test skips.
bool deviceAvailable(std::string* why = nullptr);

struct NodeRunOptions {
  uint64_t seed = 0;        ///< the run seed random kernels read (*ctx.run_seed)
  uint64_t node_index = 0;  ///< as the executor would pass it
  int timing_runs = 0;      ///< > 0: also time the kernel over this many runs
};

struct NodeRunResult {
  std::vector<Tensor> outputs;  ///< on the host, the node's output types
  int error_flag = 0;           ///< the kernel's data-fault flag (0: none)
  double best_millis = 0;       ///< fastest of the timing runs (CUDA events)
};

/// Run `n` with kernel `k` (nullptr: the registry's choice) on `inputs`.
/// An Error names the node when no kernel fits or CUDA fails.
Result<NodeRunResult> runNode(const Node& n, std::span<const Tensor> inputs, const CudaKernelDef* k = nullptr,
                              NodeRunOptions options = {});

}  // namespace kiln::cuda
