#include "core/plugin_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

namespace kiln {
namespace fs = std::filesystem;

Result<void*> loadPluginEntry(const PluginSpec& spec) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv(spec.env.c_str()); env && *env) candidates.push_back(env);
  std::error_code ec;
  const fs::path exe_dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  if (!ec) {
    candidates.push_back((exe_dir / spec.file).string());
    candidates.push_back((exe_dir / ".." / "lib" / "kiln" / spec.file).string());
  }
  if (!spec.build_path.empty()) candidates.push_back(spec.build_path);
  std::string tried;
  for (const std::string& path : candidates) {
    if (!fs::exists(path, ec)) {
      tried += (tried.empty() ? "" : ", ") + path + " (absent)";
      continue;
    }
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) return Error{"cannot load the " + spec.what + " " + path + ": " + dlerror()};
    void* entry = dlsym(h, spec.entry.c_str());
    if (!entry) return Error{path + " is not a Kiln " + spec.what + " (no " + spec.entry + ")"};
    return entry;
  }
  return Error{"the " + spec.what + " " + spec.file + " is not installed; tried " + tried};
}

}  // namespace kiln
