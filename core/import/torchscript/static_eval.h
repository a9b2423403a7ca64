// Import-time evaluation of TorchScript's non-tensor computation: shape
// queries (aten::size, aten::dim, prim::dtype), Python int/float/bool/str
// arithmetic, list and tuple plumbing, and arithmetic on one-element constant
// tensors (what prim::NumToTensor makes of sizes in traced graphs). Also
// PyTorch's result-dtype rule, which the run-time lowering shares. No torch
// headers here.
#pragma once

#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/import/torchscript/static_value.h"

namespace kiln::ts {

/// Evaluate TorchScript op `kind` (e.g. "aten::floordiv", "prim::ListUnpack")
/// at import time. `num_outputs` is the node's output count (ListUnpack).
/// Returns nullopt when the op is not an import-time op or an operand is a
/// tensor computed at run time (then it is lowered to Kiln ops instead).
/// Throws KilnException on errors such as a division by zero or an index out
/// of range.
std::optional<std::vector<SV>> evalStatic(std::string_view kind, std::span<const SV> args, size_t num_outputs);

/// The dtype of a tensor-like or number operand as PyTorch sees it (ints are
/// i64, floats f32 -- the default dtype -- and bools bool).
DType dtypeOf(const SV& v);

/// PyTorch's result type of an op over `operands` (tensors, constants and
/// numbers; None and non-numbers are skipped): dimensioned tensors decide
/// within a category, then 0-d tensors, then Python numbers, and a higher
/// category (bool < int < float) from any of them wins.
DType resultType(std::span<const SV* const> operands);
DType resultType(const SV& a, const SV& b);

}  // namespace kiln::ts
