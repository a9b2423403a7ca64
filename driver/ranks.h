// Data-parallel runs from the command line: the launcher that
// `kiln train --nproc N` is, and how a rank joins the others.
//
// The launcher starts N copies of the same command line (without --nproc)
// as ranks 0..N-1, with torchrun's environment (RANK, WORLD_SIZE,
// MASTER_ADDR=127.0.0.1, MASTER_PORT=a free port), and waits for them. Rank
// 0 prints and writes the outputs; the others' standard output is dropped,
// their errors are kept. When a rank fails, the others get the
// communication timeout to fail on their own (with their own message), then
// are killed; the launcher exits with the first failing rank's code.
//
// A process started by an external launcher (RANK and WORLD_SIZE set) joins
// directly: joinRanks() connects it through Gloo.
#pragma once

#include <memory>

#include "backend/comm/collective_engine.h"
#include "driver/compile.h"

namespace kiln::driver {

/// Whether this process should act as the launcher: --nproc > 1 and not
/// itself a rank (no RANK in the environment).
bool shouldLaunch(const CompileOptions& a);

/// Start a.nproc ranks of this process's command line and wait for them;
/// returns the exit code (0 when every rank succeeded).
int launchRanks(const CompileOptions& a);

/// When the environment makes this process a rank of several (RANK,
/// WORLD_SIZE > 1), connect to the others and set a.collectives; errors from
/// then on name the rank. Nothing to do for a single process.
Status joinRanks(CompileOptions& a);

/// Whether this process writes outputs and prints progress: rank 0, or a
/// single process.
inline bool isLeadRank(const CompileOptions& a) {
  return !a.collectives || a.collectives->rank() == 0;
}

}  // namespace kiln::driver
