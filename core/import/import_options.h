// Options shared by the model importers.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "core/result.h"
#include "core/tensor_type.h"

namespace kiln {

/// An operator the importer could not lower (`kiln check`).
struct UnsupportedOp {
  std::string op;        ///< "aten::lgamma", "aten.lgamma.default"
  std::string reason;    ///< why: no lowering, or the lowering's error
  std::string location;  ///< source line, when the model recorded one
  std::string scope;     ///< module path
};

struct ImportOptions {
  /// Types of the data inputs (input0, input1, ...). TorchScript archives do
  /// not record shapes: when this is empty the importer reads the
  /// "kiln_inputs.json" extra file that models/export.py stores in the
  /// archive, and fails with a message asking for shapes when there is none.
  std::vector<TensorType> input_types;
  /// Import in training mode (BatchNorm batch statistics and running-stat
  /// updates, dropout active). TorchScript traces record the mode they were
  /// traced in; this flag is checked against it.
  bool training = false;
  /// When set, the importer does not stop at the first op it cannot lower:
  /// it records each one here, treats its results and everything computed
  /// from them as unknown, imports the rest, and fails at the end.
  std::vector<UnsupportedOp>* unsupported = nullptr;
  /// Asked between the import's phases and every few hundred nodes; false
  /// stops the import with an ErrorKind::kCancelled error (kiln-studio's
  /// Cancel). Reading the archive itself (libtorch's load) cannot stop.
  /// Empty: never asked.
  std::function<bool()> keep_going;
};

/// How many nodes an importer lowers between two keep_going questions.
inline constexpr size_t kNodesBetweenCancelChecks = 256;

/// Fails with ErrorKind::kCancelled when `o.keep_going` says stop.
inline void stopIfCancelled(const ImportOptions& o) {
  if (o.keep_going && !o.keep_going()) fail("cancelled", ErrorKind::kCancelled);
}

}  // namespace kiln
