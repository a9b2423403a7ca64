// Reference CPU executor: runs a Graph node by node in its order with the
// kernels the registry selects, freeing each intermediate after its last use.
// Multi-threading happens inside kernels (OpenMP, OpenBLAS, oneDNN).
#pragma once

#include <string>
#include <vector>

#include "backend/kernel.h"
#include "core/model.h"
#include "core/result.h"

namespace kiln {

struct CpuExecutorOptions {
  uint64_t seed = 0;
  int num_threads = 0;  ///< 0: the library default (all cores)
};

/// Which kernel runs each node (for reports and `kiln run --verbose`).
struct KernelChoice {
  std::string node;    ///< "conv2d @layer1.0.conv1"
  std::string kernel;  ///< "cpu_dnnl.conv2d"
};

class CpuExecutor {
 public:
  /// Bind a kernel to every node; an error names each node without a kernel.
  static Result<CpuExecutor> create(const Graph& graph, CpuExecutorOptions options = {});
  /// Run once. `inputs` binds every graph input by name (data inputs and
  /// weights alike); returns the graph outputs in order.
  Result<std::vector<Tensor>> run(const TensorMap& inputs);
  /// Convenience: bind weights from the model and data inputs input0.. in order.
  Result<std::vector<Tensor>> runModel(const Model& model, const std::vector<Tensor>& data);

  const std::vector<KernelChoice>& kernelChoices() const { return choices_; }
  /// Random ops draw from (seed, run index, node index); the run index counts
  /// runs unless set here (training sets it to the step number so a resumed
  /// run draws the same numbers as one that never stopped).
  void setRunIndex(uint64_t index) { runs_ = index; }
  /// Time every node of the following runs (`kiln bench --profile`).
  void setProfiling(bool on) { node_ms_.assign(on ? nodes_.size() : 0, 0.0); }
  /// Milliseconds spent in each node (in graph order) over the runs since
  /// profiling was switched on; empty when it is off.
  const std::vector<double>& nodeMillis() const { return node_ms_; }
  const std::vector<const Node*>& nodes() const { return nodes_; }

 private:
  const Graph* graph_ = nullptr;
  CpuExecutorOptions options_;
  std::vector<const Node*> nodes_;
  std::vector<const KernelDef*> kernels_;
  std::vector<KernelChoice> choices_;
  uint64_t runs_ = 0;
  std::vector<double> node_ms_;
};

}  // namespace kiln
