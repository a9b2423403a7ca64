// The executable side of backend/aten/torch_plugin.h: finds and dlopens
// libkiln_torch.so (core/plugin_loader.h) the first time the TorchScript
// importer or libtorch's eager step is needed.
#include <mutex>

#include "backend/aten/torch_plugin.h"
#include "core/plugin_loader.h"

namespace kiln {

PluginSpec torchPluginSpec() {
#ifdef KILN_TORCH_PLUGIN_BUILD_PATH
  const std::string build_path = KILN_TORCH_PLUGIN_BUILD_PATH;
#else
  const std::string build_path;
#endif
  return {"libkiln_torch.so", "KILN_TORCH_PLUGIN", build_path, KILN_TORCH_PLUGIN_ENTRY, "libtorch plugin"};
}

Result<const TorchPlugin*> torchPlugin() {
  static std::once_flag once;
  static Result<const TorchPlugin*> loaded = Error{"not loaded"};
  std::call_once(once, [] {
    auto entry = loadPluginEntry(torchPluginSpec());
    if (!entry) {
      loaded = entry.error();
      return;
    }
    loaded = reinterpret_cast<const TorchPlugin* (*)()>(*entry)();
  });
  return loaded;
}

}  // namespace kiln
