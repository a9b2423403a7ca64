// Placeholder: the TorchScript importer is being written.
#include "core/import/torchscript/torchscript_importer.h"

namespace kiln {
Result<Model> importTorchScript(const std::string& path, const ImportOptions&) {
  return Error{path + ": TorchScript import is not implemented yet"};
}
}  // namespace kiln
