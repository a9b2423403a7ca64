// CPU kernels: their entry point and flags, and the registry of every CPU
// kernel family (dialects cpu, blas, onednn; gloo for collectives). Selection among them is
// kernel_table.h's: by priority, or in the order `--dialects` gives.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "backend/kernel_table.h"
#include "core/ir.h"
#include "core/memory_rules.h"
#include "core/tensor.h"

namespace kiln {

class CollectiveEngine;

/// Per-run state a kernel may use.
struct KernelContext {
  /// Seed for random ops; each random node derives its stream from the seed
  /// and its `node_index` so runs are reproducible.
  uint64_t seed = 0;
  uint64_t node_index = 0;
  int num_threads = 1;
  /// The data-parallel run's collectives (backend/comm/collective_engine.h);
  /// nullptr in a single process.
  CollectiveEngine* collectives = nullptr;
};

/// Kernel entry point. `outputs` arrives sized to the node's outputs, each
/// undefined or bound by the executor to a planned buffer of the output's
/// type; the kernel fills each through allocOutput (which keeps a planned
/// buffer), assigns a tensor of its own, or aliases input 0's buffer for a
/// view (Tensor::reshaped; register with output_views_input0). A kernel
/// must not return any other input's buffer. Inputs are contiguous.
/// Errors (e.g. an index out of range in the data) throw KilnException.
using KernelFn = void (*)(const Node& n, std::span<const Tensor> inputs, std::span<Tensor> outputs, KernelContext& ctx);

struct KernelDef {
  std::string op;
  std::string dialect;                 ///< "cpu", "blas", "onednn", "gloo"
  std::string name;                    ///< unique, "dialect.op[_variant]", e.g. "cpu.add"
  int priority = 0;                    ///< higher wins
  KernelPredicate supports = nullptr;  ///< nullptr: all nodes of `op`
  KernelFn fn = nullptr;
  /// The output is a view of input 0's buffer (reshape): the memory plan
  /// gives it no buffer of its own and keeps the input's alive.
  bool output_views_input0 = false;
  /// Each element of every input is read before the same element of any
  /// output is written (optimizer updates): the executor may bind an output
  /// to the buffer of the graph input it replaces (TrainingSession donates
  /// parameters and optimizer state it alone holds), updating in place.
  bool updates_in_place = false;
  /// Elementwise loops (and kOutput0OverInput ops): output 0 may be bound
  /// to the buffer of an input of its exact type that no later node reads
  /// (core/liveness.h elementwiseInPlace), because each output element is
  /// written after the input elements at its index are read and nothing is
  /// read after it.
  bool writes_over_input = false;
  /// May run on one thread beside other nodes (node_stages.h): computes the
  /// same on one thread as on many and keeps no unlocked state. Not oneDNN's
  /// kernels: their reductions split by the thread count.
  bool runs_beside_others = true;
};

class KernelRegistry : public KernelTable<KernelDef> {
 public:
  /// The registry with every CPU kernel family registered.
  static const KernelRegistry& cpu();
};

/// The CPU's memory rules (core/memory_rules.h) under a dialect selection:
/// read off the registry's kernels (backend/kernel_memory_rules.h). Target
/// "cpu", or "cpu[dialects]" when the selection is restricted.
MemoryRules cpuMemoryRules(const DialectOrder& order = {});

/// Allocate output `i` of `n` with its inferred type and return it, or return
/// the buffer the executor placed there (a planned arena slot, or a donated
/// input for updates_in_place kernels) when it has that type. The memory is
/// NOT cleared: the kernel must write every element.
Tensor& allocOutput(const Node& n, std::span<Tensor> outputs, size_t i);

// Family registration (backend/cpu/kernels_*.cpp).
void registerCpuElementwiseKernels(KernelRegistry& r);
void registerCpuReductionKernels(KernelRegistry& r);
void registerCpuShapeKernels(KernelRegistry& r);
void registerCpuLinalgKernels(KernelRegistry& r);
void registerCpuNNKernels(KernelRegistry& r);
void registerCpuLossKernels(KernelRegistry& r);
// Kernels of the *_backward ops (backend/cpu/kernels_*_grad.cpp) and optimizers.
void registerCpuElementwiseGradKernels(KernelRegistry& r);
void registerCpuShapeGradKernels(KernelRegistry& r);
void registerCpuNNGradKernels(KernelRegistry& r);
void registerCpuNormGradKernels(KernelRegistry& r);
void registerCpuLossGradKernels(KernelRegistry& r);
void registerCpuOptimizerKernels(KernelRegistry& r);
void registerCpuRowSparseKernels(KernelRegistry& r);  // backend/cpu/kernels_row_sparse.cpp
void registerCpuFusedKernels(KernelRegistry& r);
void registerCpuCollectiveKernels(KernelRegistry& r);  // backend/comm/kernels_collective.cpp

}  // namespace kiln
