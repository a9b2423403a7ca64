// FX dump importer: NAME.fx.json (+ NAME.safetensors beside it) written by
// models/fx_dump.py (format: docs/fx-format.md). Needs only nlohmann_json and
// the safetensors reader.
//
// Graph inputs: `input` placeholders -> Data inputs input0, input1, ...;
// params -> Param and buffers -> Buffer inputs named by state_dict key;
// lifted constants -> Const inputs `__const.<name>`. Tied parameters are one
// input plus Model::aliases. Outputs: output0, ... then one BufferUpdate
// output per updated buffer (named by its key). Every node keeps the FX
// node's scope and its source location as provenance. Every Kiln value is
// checked against the dtype/shape the dump recorded.
#pragma once

#include <string>
#include <vector>

#include "core/import/import_options.h"
#include "core/model.h"
#include "core/result.h"

namespace kiln {

/// Import an FX dump from a file; weights come from the file named by its
/// "weights_file" field, relative to the JSON's directory.
Result<Model> importFx(const std::string& path, const ImportOptions& options = {});
/// Import from JSON text with weights already loaded (fuzzing, tests).
/// `where` names the source in error messages.
Result<Model> importFxJson(const std::string& json_text, const TensorMap& weights, const std::string& where,
                           const ImportOptions& options = {});

/// Every FX target the importer lowers ("aten.add.Tensor", ..., "operator.getitem"), sorted.
std::vector<std::string> fxSupportedOps();

}  // namespace kiln
