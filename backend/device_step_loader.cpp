// The executable side of backend/device_step.h: finds and dlopens
// libkiln_cuda.so (core/plugin_loader.h) the first time `--device cuda` is
// asked for.
#include <mutex>

#include "backend/device_step.h"
#include "core/plugin_loader.h"

namespace kiln {

std::optional<PluginSpec> cudaPluginSpec() {
#ifndef KILN_CUDA_PLUGIN_BUILD_PATH
  return std::nullopt;
#else
  return PluginSpec{"libkiln_cuda.so", "KILN_CUDA_PLUGIN", KILN_CUDA_PLUGIN_BUILD_PATH, KILN_CUDA_PLUGIN_ENTRY,
                    "CUDA plugin"};
#endif
}

Result<const DeviceBackend*> cudaBackend() {
  static std::once_flag once;
  static Result<const DeviceBackend*> loaded = Error{"not loaded"};
  std::call_once(once, [] {
    const std::optional<PluginSpec> spec = cudaPluginSpec();
    if (!spec) {
      loaded = Error{"--device cuda: this build of Kiln has no CUDA backend (configure with -DKILN_WITH_CUDA=ON)"};
      return;
    }
    auto entry = loadPluginEntry(*spec);
    if (!entry) {
      loaded = Error{"--device cuda: " + entry.error().message};
      return;
    }
    loaded = reinterpret_cast<const DeviceBackend* (*)()>(*entry)();
  });
  return loaded;
}

}  // namespace kiln
