// NCCL between the GPUs of a data-parallel run: the device counterpart of
// backend/comm/communicator.h. Every collective is enqueued on a CUDA stream
// (the caller's) and works in place on device memory; nothing waits on the
// host, so the collectives of a step are captured into its CUDA graph with
// the rest of it.
//
// The ranks meet through an NCCL unique id that rank 0 makes (uniqueId())
// and hands to the others over the host communicator (Gloo) that the
// launcher already connected. Sums keep NCCL's order; uneven per-rank
// slices (ZeRO-1's owners) use grouped ncclReduce / ncclBroadcast, since
// ncclReduceScatter and ncclAllGather take equal slices only.
//
// Errors throw KilnException naming the collective, the rank and NCCL's
// reason. The communicator is non-blocking (ncclCommInitRankConfig with
// blocking = 0): joining waits at most the rendezvous timeout, and the
// host's waits on a step (cuda_sync.h's HostWaitWatch, installed by the
// executor) at most the collective timeout; past either, or on NCCL's
// asynchronous error, the communicator is aborted (its spinning kernels
// end) and the wait throws one line naming the rank. An aborted
// communicator fails every later call at once.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nccl.h>

#include "backend/cuda/cuda_sync.h"
#include "core/dtype.h"
#include "core/result.h"

namespace kiln::cuda {

struct NcclTimeouts {
  std::chrono::milliseconds init{std::chrono::minutes(10)};        ///< joining the ranks
  std::chrono::milliseconds collective{std::chrono::minutes(30)};  ///< a step's collectives
};

class NcclCommunicator {
 public:
  /// A new unique id (rank 0 calls it; ncclUniqueId's bytes).
  static Result<std::string> uniqueId();
  /// Join the ranks that got `unique_id`, on the current CUDA device. With
  /// size 1 and no id no NCCL communicator is made (every collective is
  /// local); with an id, a one-rank NCCL communicator (for tests).
  static Result<std::unique_ptr<NcclCommunicator>> create(int rank, int size, const std::string& unique_id,
                                                          NcclTimeouts timeouts = {});
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// "NCCL 2.28.3".
  static std::string version();

  /// As Communicator's, on device memory, enqueued on `stream`.
  void allreduceSum(void* data, size_t count, DType dtype, cudaStream_t stream);
  void reduceScatterSum(void* data, const std::vector<size_t>& counts, DType dtype, cudaStream_t stream);
  void allGather(void* data, const std::vector<size_t>& counts, DType dtype, cudaStream_t stream);
  void broadcast(void* data, size_t bytes, int root, cudaStream_t stream);

  /// What the executor installs for the host's waits (cuda_sync.h):
  /// nullptr without a communicator (one rank).
  std::shared_ptr<const HostWaitWatch> hostWaitWatch();
  /// NCCL's asynchronous error, "" while there is none.
  std::string asyncError() const;
  /// ncclCommAbort, once; later calls fail at once.
  void abort();

 private:
  NcclCommunicator(int rank, int size) : rank_(rank), size_(size) {}
  std::string where(const char* what) const;
  /// A call's result: ncclInProgress (non-blocking) waits until NCCL has
  /// taken it, at most `timeout`; any other error throws naming `where`.
  void settle(ncclResult_t r, const std::string& where, std::chrono::milliseconds timeout, const std::string& hint);
  void call(ncclResult_t r, const std::string& where);
  /// One NCCL call per rank with a non-empty slice, as one group: `call`
  /// gets the slice's byte offset, element count and rank.
  void perRankSlices(const char* what, const std::vector<size_t>& counts, size_t elem_bytes,
                     const std::function<ncclResult_t(size_t offset, size_t count, int root)>& call);

  int rank_ = 0, size_ = 1;
  void* comm_ = nullptr;  ///< ncclComm_t
  NcclTimeouts timeouts_;
  bool aborted_ = false;
};

}  // namespace kiln::cuda
