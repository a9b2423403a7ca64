// Placeholder: the FX importer is being written.
#include "core/import/fx/fx_importer.h"

namespace kiln {
Result<Model> importFx(const std::string& path, const ImportOptions&) {
  return Error{path + ": FX import is not implemented yet"};
}
Result<Model> importFxJson(const std::string&, const TensorMap&, const std::string& where, const ImportOptions&) {
  return Error{where + ": FX import is not implemented yet"};
}
}  // namespace kiln
