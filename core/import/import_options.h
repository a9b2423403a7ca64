// Options shared by the model importers.
#pragma once

#include <vector>

#include "core/tensor_type.h"

namespace kiln {

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
};

}  // namespace kiln
