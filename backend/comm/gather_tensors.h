// Every rank's tensors on every rank: how ZeRO-1's sharded optimizer state
// becomes one state dict for a checkpoint (torch's
// ZeroRedundancyOptimizer.consolidate_state_dict does the same job); and
// rank 0's bytes on every rank: how a checkpoint that only rank 0 can read
// reaches the others.
#pragma once

#include "backend/comm/communicator.h"
#include <string>

#include "core/tensor.h"

namespace kiln {

/// Collective: every rank calls it with its own tensors and gets the union
/// of all ranks' tensors (two all-gathers: the sizes, then the tensors with
/// their names, dtypes and shapes). A name held by two ranks keeps the lower
/// rank's tensor.
TensorMap allGatherTensors(Communicator& comm, const TensorMap& mine);

/// Collective: `bytes` of `root` on every rank (its length, then its bytes).
void broadcastBytes(Communicator& comm, std::string& bytes, int root);

}  // namespace kiln
