// Every call of the CUDA backend that makes the host wait for the device,
// in one place, counted. A training step must make none: the executor's
// run() only enqueues (and replays a CUDA graph), and the loss is read back
// only when the caller asks. Tests read syncCalls() around steps, and a
// source check (tests/cuda/no_sync_in_kernels_test.cpp) keeps every other
// file of backend/cuda from calling the synchronizing APIs directly.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/ir.h"

namespace kiln::cuda {

/// Synchronizing calls made so far by this process through the functions below.
uint64_t syncCalls();

/// While one is set (an executor whose steps run NCCL collectives), the
/// host's waits below poll the device with this deadline and, when it
/// passes or NCCL reports an error, abort the communicator and throw
/// (backend/comm/watchdog.h) instead of blocking for ever on a dead peer.
struct HostWaitWatch {
  std::chrono::milliseconds timeout;
  std::function<std::string()> failure;  ///< NCCL's asynchronous error, "" while none
  std::function<void()> abort;           ///< ncclCommAbort
  std::string hint;                      ///< why it would not finish
};
void setHostWaitWatch(std::shared_ptr<const HostWaitWatch> watch);

/// cudaStreamSynchronize; throws naming `what` and `node`.
void streamSync(cudaStream_t s, const char* what, const Node* node = nullptr);
/// Waits for `s` and ignores errors (destructors: nothing to report to).
void drain(cudaStream_t s) noexcept;
/// cudaEventSynchronize.
void eventSync(cudaEvent_t e, const char* what);
/// Blocking device-to-host copy on `s` (the stream is drained first).
void copyToHost(void* dst, const void* src, size_t bytes, cudaStream_t s, const char* what);
/// Blocking host-to-device copy (setup only: uploads weights once).
void copyToDevice(void* dst, const void* src, size_t bytes, cudaStream_t s, const char* what);
/// cudaMalloc / cudaFree / cudaMallocHost / cudaFreeHost: they synchronize
/// the device, so only at set-up and tear-down. Allocation failures throw
/// an out-of-memory message with the size asked for and what is free.
void* deviceAlloc(size_t bytes, const char* what);
void deviceFree(void* p);
void* pinnedAlloc(size_t bytes, const char* what);
void pinnedFree(void* p);

}  // namespace kiln::cuda
