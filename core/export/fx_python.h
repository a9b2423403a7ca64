// Export of a Kiln graph (normally the optimized training step) as a Python
// file that rebuilds it as a runnable torch.fx.GraphModule of aten ops, so
// that a PyTorch user can run Kiln's step in PyTorch and get the same
// results (`kiln export --format fx`).
#pragma once

#include <string>

#include "core/ir.h"
#include "core/result.h"
#include "core/tensor.h"

namespace kiln {

/// The Python source. Fails, naming the node, on an op that has no PyTorch
/// equivalent here (collectives: a data-parallel step needs its ranks).
/// `consts` holds the tensors of the graph's const inputs (a trace's baked-in
/// tensors, Model::weights): they are written into the file (CONSTS), and
/// run() binds them; a const input without one is an error.
Result<std::string> graphToFxPython(const Graph& g, const TensorMap& consts = {});

}  // namespace kiln
