// The parts of Kiln that need libtorch, the TorchScript importer and
// libtorch's eager training step (`kiln bench --compare torch`), live in a
// plugin, libkiln_torch.so, loaded the first time one is needed. The kiln
// executable does not link libtorch: the dynamic loader spends 0.65 s on
// libtorch's libraries at start-up, which a command that imports nothing
// (a compile-cache hit, kiln cache, kiln passes, kiln opt) should not pay.
//
// The plugin resolves Kiln's own symbols (IR, op table, passes) from the
// executable that loads it (built with ENABLE_EXPORTS), so there is one op
// table and one registry per process.
#pragma once

#include <memory>
#include <string>

#include "backend/aten/torch_eager_trainer.h"
#include "core/import/import_options.h"
#include "core/model.h"
#include "core/plugin_loader.h"
#include "core/result.h"

namespace kiln {

/// libtorch's eager step behind the plugin boundary (TorchEagerTrainer's API).
class EagerTrainer {
 public:
  virtual ~EagerTrainer() = default;
  virtual Status setBatch(const TensorMap& batch) = 0;
  virtual Status step(double lr) = 0;
  virtual double lastLoss() const = 0;
};

class TorchPlugin {
 public:
  virtual ~TorchPlugin() = default;
  virtual Result<Model> importTorchScript(const std::string& path, const ImportOptions& options) const = 0;
  virtual Result<std::unique_ptr<EagerTrainer>> createEagerTrainer(const TorchEagerConfig& config) const = 0;
  /// The libtorch version the plugin was built against ("1.13.0").
  virtual std::string torchVersion() const = 0;
};

/// The plugin's entry point (extern "C", versioned with the interface).
#define KILN_TORCH_PLUGIN_ENTRY "kiln_torch_plugin_v1"

/// The plugin, loaded once: $KILN_TORCH_PLUGIN, else libkiln_torch.so beside
/// the executable, else ../lib/kiln/ beside it, else where the build put it.
/// The error names every place tried and the loader's reason.
Result<const TorchPlugin*> torchPlugin();

/// Where torchPlugin() looks for libkiln_torch.so (core/plugin_loader.h);
/// the compile cache keys its entries by that file too.
PluginSpec torchPluginSpec();

}  // namespace kiln
