// Finding and opening a Kiln plugin (a MODULE library the kiln executable
// loads on first use, taking Kiln's own symbols from the executable): the
// libtorch plugin (backend/aten/torch_plugin.h) and the CUDA plugin
// (backend/device_step.h) are found the same way.
#pragma once

#include <optional>
#include <string>

#include "core/result.h"

namespace kiln {

struct PluginSpec {
  std::string file;        ///< "libkiln_cuda.so"
  std::string env;         ///< variable that names the file to use instead ("KILN_CUDA_PLUGIN")
  std::string build_path;  ///< where the build put it (may be empty)
  std::string entry;       ///< extern "C" entry point to look up
  std::string what;        ///< "CUDA plugin", for messages
};

/// The file loadPluginEntry would open: the first of $env, next to the
/// executable, ../lib/kiln/ and build_path that exists; nullopt if none.
std::optional<std::string> findPlugin(const PluginSpec& spec);

/// Looks for the plugin at $env, next to the executable, in ../lib/kiln/,
/// then at build_path; dlopens the first that exists (RTLD_NOW: a missing
/// symbol is an error now, not a crash later) and returns its entry point.
/// Errors are one line: the file that failed to load and why, a file that is
/// not such a plugin, or every place tried.
Result<void*> loadPluginEntry(const PluginSpec& spec);

}  // namespace kiln
