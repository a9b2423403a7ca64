// The executable side of backend/aten/torch_plugin.h: finds and dlopens
// libkiln_torch.so the first time the TorchScript importer or libtorch's
// eager step is needed.
#include <dlfcn.h>

#include <filesystem>
#include <mutex>

#include "backend/aten/torch_plugin.h"

namespace kiln {
namespace fs = std::filesystem;

Result<const TorchPlugin*> torchPlugin() {
  static std::once_flag once;
  static Result<const TorchPlugin*> loaded = Error{"not loaded"};
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("KILN_TORCH_PLUGIN"); env && *env) candidates.push_back(env);
    std::error_code ec;
    const fs::path exe_dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
    if (!ec) {
      candidates.push_back((exe_dir / "libkiln_torch.so").string());
      candidates.push_back((exe_dir / ".." / "lib" / "kiln" / "libkiln_torch.so").string());
    }
#ifdef KILN_TORCH_PLUGIN_BUILD_PATH
    candidates.push_back(KILN_TORCH_PLUGIN_BUILD_PATH);
#endif
    std::string tried;
    for (const std::string& path : candidates) {
      if (!fs::exists(path, ec)) {
        tried += (tried.empty() ? "" : ", ") + path + " (absent)";
        continue;
      }
      void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        loaded = Error{"cannot load the libtorch plugin " + path + ": " + dlerror()};
        return;
      }
      using Entry = const TorchPlugin* (*)();
      auto entry = reinterpret_cast<Entry>(dlsym(h, KILN_TORCH_PLUGIN_ENTRY));
      if (!entry) {
        loaded = Error{path + " is not a Kiln libtorch plugin (no " KILN_TORCH_PLUGIN_ENTRY ")"};
        return;
      }
      loaded = entry();
      return;
    }
    loaded = Error{"the libtorch plugin libkiln_torch.so (TorchScript import, libtorch eager) is not installed; "
                   "tried " + tried};
  });
  return loaded;
}

}  // namespace kiln
