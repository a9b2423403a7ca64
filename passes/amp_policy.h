// The autocast policy of the amp pass: which ops run in the low-precision
// dtype, which are forced to f32, and which run in the widest input type.
// One table (passes/amp_policy.cpp), one comment per entry, mirroring the
// op lists of torch.autocast (CUDA "float16" / "float32" lists; CPU's bf16
// list is a subset of the first).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace kiln {

/// What autocast does with one op's floating inputs.
enum class AmpCategory {
  /// GEMM-like: f32 inputs are cast to bf16/f16, the op computes (with f32
  /// accumulation) and rounds its output to bf16/f16.
  Lower,
  /// Range- or precision-sensitive: bf16/f16 inputs are cast up to f32; the
  /// output is f32.
  Fp32,
  /// Mixed inputs: the op runs in the widest input type. Kiln's elementwise
  /// type promotion already does that, so no cast is inserted.
  Promote,
};

/// One policy entry.
struct AmpPolicyEntry {
  std::string_view op;
  AmpCategory category;
  std::string_view why;  ///< the reason, shown by tools and tests
  /// How many leading inputs the policy casts (-1: all of them).
  int cast_inputs = -1;
};

/// The whole table, in the order of passes/amp_policy.cpp.
const std::vector<AmpPolicyEntry>& ampPolicy();

/// The entry of `op`, or nullptr when the table has none.
const AmpPolicyEntry* ampPolicyEntry(std::string_view op);

/// The category of `op`, or nullopt for an op autocast leaves alone (it
/// runs in whatever dtype its inputs have, like an unlisted op under
/// torch.autocast: relu on bf16 stays bf16).
std::optional<AmpCategory> ampCategory(std::string_view op);

}  // namespace kiln
