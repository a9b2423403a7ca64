// From the options to what the passes read: every option checked (one-line
// errors naming the flag), and the TrainingOptions of the loss, optimizer,
// amp, memory-budget and data-parallel passes. kiln opt and compiling a
// model share it, so both read the flags the same way.
#pragma once

#include "core/result.h"
#include "driver/compile_options.h"
#include "passes/training_options.h"

namespace kiln::driver {

/// The most ranks --nproc starts and the most threads --threads asks for:
/// past them a value is a typo, not a machine.
inline constexpr int kMaxRanks = 4096;
inline constexpr int kMaxThreads = 4096;

/// Check every option's value, before anything is read or compiled.
Status validateOptions(const CompileOptions& a);

/// The passes' options the flags ask for: the loss (with --class-weights
/// read from its file), the optimizer, amp, the memory budget and, for
/// `ranks` > 1, data parallel (ZeRO-1 graphs are `rank`'s). `a` has passed
/// validateOptions. The frozen set and the target's type are the caller's
/// (they need the model and the batch).
Result<TrainingOptions> trainingOptions(const CompileOptions& a, int ranks, int rank);

}  // namespace kiln::driver
