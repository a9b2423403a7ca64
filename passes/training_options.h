// What the training passes build: which loss, which optimizer with which
// hyper-parameters, what is frozen. Defaults are torch.optim's defaults.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "core/tensor_type.h"
#include "passes/amp_options.h"

namespace kiln {

enum class LossKind { CrossEntropy, Mse, Model };
enum class OptimizerKind { Sgd, Adam, AdamW };

std::optional<LossKind> parseLossKind(std::string_view s);
std::optional<OptimizerKind> parseOptimizerKind(std::string_view s);
std::string_view lossKindName(LossKind k);
std::string_view optimizerKindName(OptimizerKind k);

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::AdamW;
  /// Adam/AdamW: torch.optim defaults (AdamW's weight decay default is 0.01).
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  /// SGD.
  double momentum = 0, dampening = 0;
  bool nesterov = false;
  /// nullopt: the optimizer's torch default (0 for SGD/Adam, 0.01 for AdamW).
  std::optional<double> weight_decay;
  /// Global gradient-norm clipping (torch.nn.utils.clip_grad_norm_); 0: off.
  double clip_grad_norm = 0;

  double weightDecay() const { return weight_decay.value_or(kind == OptimizerKind::AdamW ? 0.01 : 0.0); }
};

struct TrainingOptions {
  LossKind loss = LossKind::CrossEntropy;
  /// Type of the `target` batch tensor (from the batch file); nullopt: the
  /// loss pass picks the natural one (see passes/loss.h).
  std::optional<TensorType> target;
  OptimizerOptions optimizer;
  /// Parameters (Param input names) that get no gradient and no update:
  /// the freeze pass removes that work (passes/freeze.h).
  std::set<std::string> frozen;
  /// Mixed precision (passes/amp.h): off by default.
  AmpOptions amp;
  /// Peak memory (bytes) the step must fit in; remat recomputes activations
  /// to get there (passes/remat.h). 0: no budget.
  uint64_t memory_budget = 0;
};

}  // namespace kiln
