// Timing CPU kernels for autotuning (`--autotune`; the choice itself is
// kernel_selection.h's): every kernel that accepts a node is run on the
// node's real shapes with autotuneInputs, and the fastest is kept.
#pragma once

#include <span>
#include <vector>

#include "backend/kernel.h"
#include "backend/kernel_selection.h"

namespace kiln::cpu {

/// Times each of `kernels` on `n` (a warm-up run, then runs until 3 and 2 ms,
/// at most 20), with `num_threads` OpenMP threads. Returns them in the given
/// order; a kernel that throws gets millis < 0 and its message.
std::vector<KernelTiming> timeKernels(const Node& n, std::span<const KernelDef* const> kernels, int num_threads);

}  // namespace kiln::cpu
