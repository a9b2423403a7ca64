// TorchScript importer (needs libtorch; the only code that includes it).
#pragma once

#include <string>

#include "core/import/import_options.h"
#include "core/model.h"
#include "core/result.h"

namespace kiln {

/// Import a torch.jit.trace / torch.jit.script archive.
Result<Model> importTorchScript(const std::string& path, const ImportOptions& options = {});

}  // namespace kiln
