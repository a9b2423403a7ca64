// libtorch's eager training step, as the yardstick `kiln bench --compare
// torch` measures Kiln against: the same TorchScript module (so the same
// weights), the same batch, loss, optimizer and hyper-parameters, written the
// way a PyTorch user writes a training loop (forward, loss, backward,
// clip_grad_norm_, optimizer.step, zero_grad) with torch::optim.
//
// This header does not include libtorch; only its .cpp does, so the CLI that
// uses it compiles without libtorch's headers.
#pragma once

#include <memory>
#include <set>
#include <string>

#include "core/result.h"
#include "core/tensor.h"
#include "passes/training_options.h"

namespace kiln {

struct TorchEagerConfig {
  std::string model_path;  ///< a TorchScript archive (.pt)
  TrainingOptions training;  ///< loss, optimizer, frozen parameters (state_dict names)
  int num_threads = 0;       ///< 0: leave libtorch's default
};

class TorchEagerTrainer {
 public:
  /// Load the archive in train mode and build the optimizer over every
  /// parameter not in `training.frozen` (those get requires_grad = false).
  static Result<std::unique_ptr<TorchEagerTrainer>> create(const TorchEagerConfig& config);
  ~TorchEagerTrainer();

  /// Copy the next batch (input0.., target) into libtorch tensors, outside
  /// the timed step.
  Status setBatch(const TensorMap& batch);
  /// One step on the batch set last, with learning rate `lr`.
  Status step(double lr);
  /// Loss of the last step.
  double lastLoss() const;
  /// Parameters and buffers, keyed like state_dict().
  TensorMap stateDict() const;
  /// The libtorch version this was built against ("1.13.0").
  static std::string torchVersion();

 private:
  TorchEagerTrainer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
