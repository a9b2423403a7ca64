// Kernel selection shared by the CPU and CUDA executors: which kernel each
// node of a step gets, from the options every executor takes the same way
// (`--dialects`, `--autotune`, or the choices a compiled plan recorded), and
// what is reported about it.
//
// Choosing is two steps per node, so an executor can run the first one on
// its own threads (the CPU's predicates build oneDNN primitives):
//  1. kernelCandidates: the recorded kernel, every applicable kernel
//     (autotuning), or the selected one;
//  2. pickKernel: the only candidate, or the fastest of them by the
//     executor's timing function, timed once per node signature.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backend/kernel_table.h"
#include "core/ir.h"
#include "core/result.h"
#include "core/tensor.h"

namespace kiln {

/// One kernel's time on one node.
struct KernelTiming {
  std::string kernel;
  double millis = 0;  ///< fastest of the timed runs; < 0: it failed (see error)
  std::string error;
};

/// Which kernel runs each node (for reports and `kiln run --verbose`).
struct KernelChoice {
  std::string node;     ///< "conv2d @layer1.0.conv1"
  std::string kernel;   ///< "onednn.conv2d"
  std::string dialect;  ///< "onednn"
  /// With autotuning, every candidate's time on this node (the chosen one
  /// among them); empty when the node had one candidate or was not timed.
  std::vector<KernelTiming> timings;
};

/// How an executor chooses its kernels.
struct KernelSelection {
  /// Dialects kernels may come from, best first (`--dialects`); empty: all, by priority.
  DialectOrder dialects;
  /// Time every applicable kernel on each node's shapes and keep the
  /// fastest, instead of taking the first by priority.
  bool autotune = false;
  /// Kernel names to bind, one per node in graph order (a compiled plan's
  /// choices, read from the compile cache): no selection or timing; an
  /// error when one no longer exists or no longer accepts its node.
  std::vector<std::string> fixed_kernels;
  /// The timings recorded with `fixed_kernels` (reported as measured then).
  std::vector<std::vector<KernelTiming>> fixed_timings;
};

/// Inputs of `n`'s types for timing it: floats uniform in [-1, 1) from a
/// fixed seed, integers and bools zero (always valid indices).
std::vector<Tensor> autotuneInputs(const Node& n);

/// What makes two nodes time the same: op, attributes, input and output
/// types (not names, scope or provenance).
std::string nodeSignature(const Node& n);

/// The index of the fastest successful timing (the first on ties), or -1.
int fastest(const std::vector<KernelTiming>& timings);

/// An error unless `sel` names no kernels or one per node of `nodes`.
Status checkFixedKernels(const KernelSelection& sel, size_t nodes);

/// Step 1 for node `i` (`n`) of the graph: the kernels `sel` allows, best
/// first; empty when none does. Throws KilnException when a recorded kernel
/// no longer exists or no longer accepts the node.
template <typename Def>
std::vector<const Def*> kernelCandidates(const KernelTable<Def>& table, const Node& n, size_t i,
                                         const KernelSelection& sel) {
  if (!sel.fixed_kernels.empty()) {
    const Def* k = table.byName(n.op(), sel.fixed_kernels[i]);
    if (!k || (k->supports && !k->supports(n)))
      fail(n.describe() + ": kernel " + sel.fixed_kernels[i] + (k ? " no longer accepts it" : " does not exist"));
    return {k};
  }
  if (sel.autotune) return table.applicable(n, sel.dialects);
  if (const Def* k = table.select(n, sel.dialects)) return {k};
  return {};
}

/// Step 2 for node `i` (`n`) with its non-empty candidates `fits`: the only
/// one, or the fastest by `time(n, fits)` (a KernelTiming per candidate, in
/// order), which runs once per node signature (cached in `timed`). Throws
/// KilnException when every candidate failed.
template <typename Def, typename TimeFn>
std::pair<const Def*, KernelChoice> pickKernel(const Node& n, size_t i, const std::vector<const Def*>& fits,
                                               const KernelSelection& sel,
                                               std::map<std::string, std::vector<KernelTiming>>& timed, TimeFn&& time) {
  const Def* k = fits.front();
  std::vector<KernelTiming> timings;
  if (i < sel.fixed_timings.size()) timings = sel.fixed_timings[i];
  if (fits.size() > 1) {
    const std::string sig = nodeSignature(n);
    auto it = timed.find(sig);
    if (it == timed.end()) it = timed.emplace(sig, time(n, fits)).first;
    timings = it->second;
    const int best = fastest(timings);
    if (best < 0) fail(n.describe() + ": every kernel failed while autotuning: " + timings[0].error);
    k = fits[best];
  }
  return {k, KernelChoice{n.describe(), k->name, k->dialect, std::move(timings)}};
}

}  // namespace kiln
