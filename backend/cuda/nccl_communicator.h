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
// reason. A peer that dies inside a collective is not detected here (NCCL
// blocks in the kernel); the launcher reports the dead rank and ends the run.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nccl.h>

#include "core/dtype.h"
#include "core/result.h"

namespace kiln::cuda {

class NcclCommunicator {
 public:
  /// A new unique id (rank 0 calls it; ncclUniqueId's bytes).
  static Result<std::string> uniqueId();
  /// Join the ranks that got `unique_id`, on the current CUDA device. With
  /// size 1 and no id no NCCL communicator is made (every collective is
  /// local); with an id, a one-rank NCCL communicator (for tests).
  static Result<std::unique_ptr<NcclCommunicator>> create(int rank, int size, const std::string& unique_id);
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

 private:
  NcclCommunicator(int rank, int size) : rank_(rank), size_(size) {}
  std::string where(const char* what) const;
  /// One NCCL call per rank with a non-empty slice, as one group: `call`
  /// gets the slice's byte offset, element count and rank.
  void perRankSlices(const char* what, const std::vector<size_t>& counts, size_t elem_bytes,
                     const std::function<ncclResult_t(size_t offset, size_t count, int root)>& call);

  int rank_ = 0, size_ = 1;
  void* comm_ = nullptr;  ///< ncclComm_t
};

}  // namespace kiln::cuda
