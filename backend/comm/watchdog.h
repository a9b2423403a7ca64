// Waiting for work that another party finishes (a GPU stream's NCCL
// collectives, an NCCL communicator's non-blocking initialisation) without
// being able to hang forever: NCCL's kernels spin until their peers answer,
// so a rank that died or hangs would otherwise stall every other rank in
// cudaStreamSynchronize with no error at all. The watchdog polls instead,
// checks the communicator's asynchronous error on every poll, and at the
// deadline aborts the communicator (which ends the spinning kernels) and
// throws one line saying what did not finish and for how long it waited.
//
// Pure logic with the device calls passed in, so that it is unit-tested
// without a GPU (tests/comm/watchdog_test.cpp); backend/cuda uses it.
// Header-only: the CUDA plugin takes only the executable's symbols.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>

#include "core/result.h"

namespace kiln {

struct WatchedWork {
  /// True once the work is done (cudaStreamQuery == cudaSuccess).
  std::function<bool()> done;
  /// A non-empty reason when the communicator failed on its own
  /// (ncclCommGetAsyncError); the watchdog aborts at once.
  std::function<std::string()> failure;
  /// Ends the work for good (ncclCommAbort); called once, before throwing.
  std::function<void()> abort;
};

/// Polls `work` until it is done (first every few microseconds, backing off
/// to a millisecond); throws KilnException naming `what` when it fails or
/// `timeout` passes, after aborting it. `hint` ends the timeout's message
/// ("a rank died or hangs").
inline void watchUntilDone(const WatchedWork& work, std::chrono::milliseconds timeout, const std::string& what,
                           const std::string& hint) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  auto seconds = [&] {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(timeout.count()) / 1000.0);
    return std::string(buf);
  };
  // A step's collectives usually finish within microseconds of its last
  // kernel: poll tightly first, then back off so a long wait costs no core.
  auto pause = std::chrono::microseconds(5);
  for (;;) {
    if (work.done()) return;
    if (std::string why = work.failure(); !why.empty()) {
      work.abort();
      fail(what + ": " + why + " (aborted the communicator)");
    }
    if (Clock::now() >= deadline) {
      work.abort();
      fail(what + ": not finished within " + seconds() + "; " + hint + " (aborted the communicator)");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

}  // namespace kiln
