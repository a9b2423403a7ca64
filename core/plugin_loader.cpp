#include "core/plugin_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

namespace kiln {
namespace fs = std::filesystem;

namespace {

/// Where a plugin may be, in the order they are tried.
std::vector<std::string> candidates(const PluginSpec& spec) {
  std::vector<std::string> out;
  if (const char* env = std::getenv(spec.env.c_str()); env && *env) out.push_back(env);
  std::error_code ec;
  const fs::path exe_dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  if (!ec) {
    out.push_back((exe_dir / spec.file).string());
    out.push_back((exe_dir / ".." / "lib" / "kiln" / spec.file).string());
  }
  if (!spec.build_path.empty()) out.push_back(spec.build_path);
  return out;
}

}  // namespace

std::optional<std::string> findPlugin(const PluginSpec& spec) {
  std::error_code ec;
  for (const std::string& path : candidates(spec))
    if (fs::exists(path, ec)) return path;
  return std::nullopt;
}

Result<void*> loadPluginEntry(const PluginSpec& spec) {
  std::error_code ec;
  std::string tried;
  for (const std::string& path : candidates(spec)) {
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
