// Every rank's tensors on every rank: how ZeRO-1's sharded optimizer state
// becomes one state dict for a checkpoint (torch's
// ZeroRedundancyOptimizer.consolidate_state_dict does the same job).
#pragma once

#include "backend/comm/communicator.h"
#include "core/tensor.h"

namespace kiln {

/// Collective: every rank calls it with its own tensors and gets the union
/// of all ranks' tensors (two all-gathers: the sizes, then the tensors with
/// their names, dtypes and shapes). A name held by two ranks keeps the lower
/// rank's tensor.
TensorMap allGatherTensors(Communicator& comm, const TensorMap& mine);

}  // namespace kiln
