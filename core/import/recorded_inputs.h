// The data input types a model file records, read without importing it:
// a TorchScript archive's kiln_inputs.json entry (models/export.py writes
// it), an FX dump's input placeholders. Compiling for a --batch, --seq-len
// or rank count other than the recorded one starts from them, so the model
// is imported once, with the final shapes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kiln {

/// The recorded types of the data inputs, in order; nullopt when they
/// cannot be read cheaply (no record, a compressed entry, a malformed one):
/// the importer then says what is wrong, or finds them itself.
std::optional<std::vector<TensorType>> recordedInputTypes(const std::string& path);

}  // namespace kiln
