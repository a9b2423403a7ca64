// The executable side of backend/device_step.h: finds and dlopens
// libkiln_cuda.so the first time `--device cuda` is asked for.
#include <dlfcn.h>

#include <filesystem>
#include <mutex>

#include "backend/device_step.h"

namespace kiln {
namespace fs = std::filesystem;

Result<const DeviceBackend*> cudaBackend() {
  static std::once_flag once;
  static Result<const DeviceBackend*> loaded = Error{"not loaded"};
  std::call_once(once, [] {
#ifndef KILN_CUDA_PLUGIN_BUILD_PATH
    loaded = Error{"--device cuda: this build of Kiln has no CUDA backend (configure with -DKILN_WITH_CUDA=ON)"};
#else
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("KILN_CUDA_PLUGIN"); env && *env) candidates.push_back(env);
    std::error_code ec;
    const fs::path exe_dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
    if (!ec) {
      candidates.push_back((exe_dir / "libkiln_cuda.so").string());
      candidates.push_back((exe_dir / ".." / "lib" / "kiln" / "libkiln_cuda.so").string());
    }
    candidates.push_back(KILN_CUDA_PLUGIN_BUILD_PATH);
    std::string tried;
    for (const std::string& path : candidates) {
      if (!fs::exists(path, ec)) {
        tried += (tried.empty() ? "" : ", ") + path + " (absent)";
        continue;
      }
      void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        loaded = Error{"--device cuda: cannot load the CUDA plugin " + path + ": " + dlerror()};
        return;
      }
      using Entry = const DeviceBackend* (*)();
      auto entry = reinterpret_cast<Entry>(dlsym(h, KILN_CUDA_PLUGIN_ENTRY));
      if (!entry) {
        loaded = Error{path + " is not a Kiln CUDA plugin (no " KILN_CUDA_PLUGIN_ENTRY ")"};
        return;
      }
      loaded = entry();
      return;
    }
    loaded = Error{"--device cuda: the CUDA plugin libkiln_cuda.so is not installed; tried " + tried};
#endif
  });
  return loaded;
}

}  // namespace kiln
