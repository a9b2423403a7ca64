// Autotuning of CPU kernels (`--autotune`): every kernel that accepts a node
// is run on the node's real shapes, with inputs drawn once for it, and the
// fastest is kept. Nodes with the same signature (op, attributes, input and
// output types) are timed once. Integer inputs are zeros, so index inputs
// (embedding, gather, class targets) are always in range.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "backend/kernel.h"

namespace kiln::cpu {

/// One kernel's time on one node.
struct KernelTiming {
  std::string kernel;
  double millis = 0;  ///< fastest of the timed runs; < 0: it failed (see error)
  std::string error;
};

/// Inputs of `n`'s types for timing it: floats uniform in [-1, 1) from a
/// fixed seed, integers and bools zero (always valid indices).
std::vector<Tensor> autotuneInputs(const Node& n);

/// What makes two nodes time the same: op, attributes, input and output
/// types (not names, scope or provenance).
std::string nodeSignature(const Node& n);

/// Times each of `kernels` on `n` (a warm-up run, then runs until 3 and 2 ms,
/// at most 20), with `num_threads` OpenMP threads. Returns them in the given
/// order; a kernel that throws gets millis < 0 and its message.
std::vector<KernelTiming> timeKernels(const Node& n, std::span<const KernelDef* const> kernels, int num_threads);

/// The index of the fastest successful timing (the first on ties), or -1.
int fastest(const std::vector<KernelTiming>& timings);

}  // namespace kiln::cpu
