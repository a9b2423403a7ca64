// The fold_transposes pass: matmul(permute(a), b) and friends become one
// `gemm` node that reads the operand transposed (core/ops/linalg.cpp).
#pragma once

#include "passes/pass.h"

namespace kiln {

/// The fold_transposes pass (see passes/fold_transposes.cpp). Statistics:
/// folded (transposes read through a gemm flag instead), bytes_not_copied
/// (the folded permutes' output bytes, per step, whose copies are gone).
Result<PassResult> runFoldTransposes(Graph& g, PassContext& ctx);

}  // namespace kiln
