// Load a model by file type: ".pt"/".pth"/".zip" TorchScript archives (when
// built with libtorch) or ".fx.json" FX dumps.
#pragma once

#include <string>

#include "core/import/import_options.h"
#include "core/model.h"
#include "core/result.h"

namespace kiln {

Result<Model> loadModel(const std::string& path, const ImportOptions& options = {});

}  // namespace kiln
