// The executable side of backend/device_step.h: finds and dlopens
// libkiln_cuda.so (core/plugin_loader.h) the first time `--device cuda` is
// asked for.
#include <mutex>

#include "backend/device_step.h"
#include "core/plugin_loader.h"

namespace kiln {

Result<const DeviceBackend*> cudaBackend() {
  static std::once_flag once;
  static Result<const DeviceBackend*> loaded = Error{"not loaded"};
  std::call_once(once, [] {
#ifndef KILN_CUDA_PLUGIN_BUILD_PATH
    loaded = Error{"--device cuda: this build of Kiln has no CUDA backend (configure with -DKILN_WITH_CUDA=ON)"};
#else
    auto entry = loadPluginEntry(
        {"libkiln_cuda.so", "KILN_CUDA_PLUGIN", KILN_CUDA_PLUGIN_BUILD_PATH, KILN_CUDA_PLUGIN_ENTRY, "CUDA plugin"});
    if (!entry) {
      loaded = Error{"--device cuda: " + entry.error().message};
      return;
    }
    loaded = reinterpret_cast<const DeviceBackend* (*)()>(*entry)();
#endif
  });
  return loaded;
}

}  // namespace kiln
