// Data-parallel runs from the command line: the launcher that
// `kiln train --nproc N` is, and how a rank joins the others.
//
// The launcher starts N copies of the same command line (without --nproc)
// as ranks 0..N-1, with torchrun's environment (RANK, WORLD_SIZE,
// MASTER_ADDR=127.0.0.1, MASTER_PORT=a free port), and waits for them. Rank
// 0 prints and writes the outputs; the others' standard output is dropped,
// their errors are kept. When a rank fails, the others get a few seconds
// to fail on their own (with their own message), then are stopped; the
// launcher exits with the first failing rank's code, or with --max-restarts
// starts them all again from the newest checkpoint. Each run gets a fresh
// secret and job id for rank 0's store (KILN_STORE_TOKEN, KILN_JOB_ID).
//
// A process started by an external launcher (RANK and WORLD_SIZE set) joins
// directly: joinRanks() connects it through Gloo.
#pragma once

#include <memory>
#include <string>

#include "backend/comm/collective_engine.h"
#include "driver/compile.h"

namespace kiln::driver {

/// Whether this process should act as the launcher: --nproc > 1 and not
/// itself a rank (no RANK in the environment).
bool shouldLaunch(const CompileOptions& a);

/// What only kiln train's launcher does.
struct LaunchOptions {
  /// When a rank fails, stop the others and start them all again, from the
  /// newest checkpoint in checkpoint_dir when there is one, at most this
  /// many times (torchrun's --max-restarts).
  int max_restarts = 0;
  std::string checkpoint_dir;  ///< kiln train --checkpoint
};
inline constexpr int kMaxRestarts = 1000;

/// Start a.nproc ranks of this process's command line and wait for them;
/// returns the exit code (0 when every rank succeeded).
int launchRanks(const CompileOptions& a, const LaunchOptions& launch = {});

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
