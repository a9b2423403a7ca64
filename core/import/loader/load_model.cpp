#include "core/import/loader/load_model.h"

#include "core/buffer_pool.h"

#include "core/import/fx/fx_importer.h"
#if defined(KILN_TORCH_DIRECT)
#include "core/import/torchscript/torchscript_importer.h"
#elif defined(KILN_TORCH_PLUGIN)
#include "backend/aten/torch_plugin.h"
#endif

namespace kiln {

namespace {
bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

Result<Model> loadModel(const std::string& path, const ImportOptions& options) {
  if (endsWith(path, ".fx.json") || endsWith(path, ".json")) return importFx(path, options);
  if (endsWith(path, ".pt") || endsWith(path, ".pth") || endsWith(path, ".zip") || endsWith(path, ".ts")) {
    // The import's temporaries go back to the buffer pool, which keeps idle
    // blocks for reuse; a training step never asks for their sizes (a traced
    // loop's per-write element masks: 264 MB for 64 steps of an LSTMCell),
    // so they would stay resident for the whole run. Released here, in the
    // executable, whose pool the libtorch plugin's allocations come from.
    struct ReleaseIdle {
      ~ReleaseIdle() { releaseIdleBuffers(); }
    } release_after_import;
#if defined(KILN_TORCH_DIRECT)
    return importTorchScript(path, options);
#elif defined(KILN_TORCH_PLUGIN)
    auto plugin = torchPlugin();
    if (!plugin) return Error{path + ": " + plugin.error().message};
    return (*plugin)->importTorchScript(path, options);
#else
    return Error{path + ": this kiln was built without libtorch (KILN_WITH_TORCH=OFF), so it cannot read "
                        "TorchScript archives; export an FX dump with models/export.py --format fx instead"};
#endif
  }
  return Error{path + ": unknown model format; expected a TorchScript archive (.pt) or an FX dump (.fx.json)"};
}

}  // namespace kiln
