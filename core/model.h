// A model as Kiln imports it: the forward graph plus the tensors bound to its
// Param, Buffer and Const inputs.
#pragma once

#include <map>
#include <string>

#include "core/ir.h"
#include "core/tensor.h"

namespace kiln {

struct Model {
  Graph graph;
  /// Keyed by graph input name (Param/Buffer: the state_dict key).
  TensorMap weights;
  /// Tied parameters: extra state_dict key -> the input name that holds it.
  std::map<std::string, std::string> aliases;
  /// Where the model came from (path), for messages.
  std::string source;
  /// A shapes-only dump (models/export.py --shapes-only): the graph's
  /// parameters, buffers and constants have types but `weights` has no
  /// tensors for them. Such a model compiles (kiln compile, kiln memory,
  /// kiln-studio) but cannot run or train.
  bool shapes_only = false;

  /// Every state_dict key (aliases included) -> tensor, as PyTorch names them.
  TensorMap stateDict() const;
};

}  // namespace kiln
