// The plugin side of backend/aten/torch_plugin.h: compiled only into
// libkiln_torch.so, together with the TorchScript importer and the eager
// trainer it wraps.
#include "backend/aten/torch_plugin.h"

#include "core/import/torchscript/torchscript_importer.h"

namespace kiln {
namespace {

class PluginEagerTrainer final : public EagerTrainer {
 public:
  explicit PluginEagerTrainer(std::unique_ptr<TorchEagerTrainer> t) : t_(std::move(t)) {}
  Status setBatch(const TensorMap& batch) override { return t_->setBatch(batch); }
  Status step(double lr) override { return t_->step(lr); }
  double lastLoss() const override { return t_->lastLoss(); }

 private:
  std::unique_ptr<TorchEagerTrainer> t_;
};

class Plugin final : public TorchPlugin {
 public:
  Result<Model> importTorchScript(const std::string& path, const ImportOptions& options) const override {
    return kiln::importTorchScript(path, options);
  }
  Result<std::unique_ptr<EagerTrainer>> createEagerTrainer(const TorchEagerConfig& config) const override {
    auto t = TorchEagerTrainer::create(config);
    if (!t) return t.error();
    return std::unique_ptr<EagerTrainer>(std::make_unique<PluginEagerTrainer>(std::move(*t)));
  }
  std::string torchVersion() const override { return TorchEagerTrainer::torchVersion(); }
};

}  // namespace
}  // namespace kiln

extern "C" __attribute__((visibility("default"))) const kiln::TorchPlugin* kiln_torch_plugin_v1() {
  static const kiln::Plugin plugin;
  return &plugin;
}
