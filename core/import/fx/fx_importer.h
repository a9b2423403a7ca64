// FX dump importer: NAME.fx.json (+ NAME.safetensors beside it) written by
// models/fx_dump.py. Needs only nlohmann_json and the safetensors reader.
#pragma once

#include <string>

#include "core/import/import_options.h"
#include "core/model.h"
#include "core/result.h"

namespace kiln {

/// Import an FX dump from a file; weights come from the .safetensors beside it.
Result<Model> importFx(const std::string& path, const ImportOptions& options = {});
/// Import from JSON text with weights already loaded (fuzzing, tests).
Result<Model> importFxJson(const std::string& json_text, const TensorMap& weights, const std::string& where,
                           const ImportOptions& options = {});

}  // namespace kiln
