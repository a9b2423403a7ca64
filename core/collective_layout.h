// How a collective node's tensors lie in its staging buffer: the one layout
// the CPU collective engine (backend/comm/collective_engine.h, Gloo) and the
// CUDA collectives (backend/cuda/cuda_collectives.h, NCCL) both use, so the
// ranks of either backend agree on who sends which bytes.
//
// The tensors are grouped by dtype (a gradient bucket is normally one
// group), each group in one contiguous buffer. For a reduce_scatter or an
// allgather (ZeRO-1, core/ops/collective.cpp) the members of a group go in
// owner order, so rank r's tensors form one slice of counts[r] elements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/ir.h"

namespace kiln {

struct CollectiveLayout {
  enum class Kind { Allreduce, Broadcast, ReduceScatter, AllGather };
  struct Member {
    size_t input = 0;   ///< the node's input index
    size_t offset = 0;  ///< bytes from the start of the group's buffer
    size_t bytes = 0;
    bool mine = true;  ///< owned by this rank (allreduce, broadcast: always)
    /// The node output this member's result goes to; -1: none (a
    /// reduce_scatter member another rank owns).
    int64_t output = -1;
  };
  struct Group {
    DType dtype = DType::F32;
    size_t bytes = 0;
    std::vector<Member> members;
    /// reduce_scatter / allgather: elements per rank, in rank order.
    std::vector<size_t> counts;
  };
  Kind kind = Kind::Allreduce;
  bool average = false;  ///< divide by the world size before the sum (DDP)
  bool sparse = false;   ///< block-sparse allreduce
  int64_t block = 0;
  int64_t root = 0;  ///< broadcast
  std::vector<Group> groups;
  size_t bytes = 0;  ///< all groups

  /// Bytes rank `rank` sends for group `g` in a ring (dense allreduce:
  /// 2(N-1)/N x size; reduce-scatter: every slice but its own; all-gather:
  /// every slice but the next rank's; broadcast: the root sends it once).
  uint64_t ringSentBytes(const Group& g, int rank, int size) const;
};

/// Bytes one rank sends in a ring allreduce of `bytes`: 2 (N-1)/N x bytes.
uint64_t ringAllreduceBytes(uint64_t bytes, int ranks);

/// The layout of collective node `n` (allreduce, broadcast, reduce_scatter,
/// allgather) on rank `rank` of `size`. Throws KilnException (naming the
/// node) for a root or owner outside the ranks, or a ZeRO-1 node compiled
/// for another rank.
CollectiveLayout layoutCollective(const Node& n, int rank, int size);

}  // namespace kiln
