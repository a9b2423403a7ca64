// What the training passes build: which loss, which optimizer with which
// hyper-parameters, what is frozen. Defaults are torch.optim's defaults.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor_type.h"
#include "passes/amp_options.h"

namespace kiln {

class Graph;

enum class LossKind { CrossEntropy, Mse, Model, L1, SmoothL1, Huber, Bce, KlDiv };
enum class OptimizerKind { Sgd, Adam, AdamW, Muon };

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
  /// nullopt: the optimizer's torch default (0 for SGD/Adam, 0.01 for AdamW and Muon's AdamW part).
  std::optional<double> weight_decay;
  /// Global gradient-norm clipping (torch.nn.utils.clip_grad_norm_); 0: off.
  double clip_grad_norm = 0;
  /// Muon (passes/muon.h), for the hidden matrices; the other parameters
  /// train with AdamW (beta1, beta2, eps, weightDecay() above). Its rate is a
  /// step input (kMuonLearningRateInput), like the AdamW rate.
  double muon_momentum = 0.95, muon_weight_decay = 0;

  /// AdamW's and Muon's AdamW part: 0.01, torch.optim.AdamW's; else 0.
  double weightDecay() const {
    return weight_decay.value_or(kind == OptimizerKind::AdamW || kind == OptimizerKind::Muon ? 0.01 : 0.0);
  }
};

/// Data-parallel training (passes/data_parallel.h): what the pass inserts.
struct DataParallelOptions {
  /// Ranks; 1: the pass changes nothing.
  int world_size = 1;
  /// Gradients are grouped into allreduce buckets of about this many bytes
  /// (DDP's bucket_cap_mb, 25 MiB), in the order backward produces them.
  uint64_t bucket_bytes = 25ull << 20;
  /// ...except the first, which closes at this many (or bucket_bytes if
  /// smaller): DDP's first_bucket_bytes (1 MiB), so that communication
  /// starts early in the backward.
  uint64_t first_bucket_bytes = 1ull << 20;
  /// Gradients to allreduce block-sparse besides the embeddings' (patterns
  /// as --freeze takes them: a name, a module prefix or a glob).
  std::vector<std::string> sparse_patterns;
  /// Embedding gradients go block-sparse (rows no token touched are zero).
  bool sparse_embeddings = true;
  /// ...and stay row-sparse from the backward to the update
  /// (core/ops/row_sparse.cpp): embedding_backward_rows, allreduce_rows,
  /// rows_to_dense for the readers that need it; both backends have these
  /// kernels (on the GPU the rows travel by NCCL all-gather).
  bool row_sparse_embeddings = true;
  /// Sparse falls back to dense when it would send more than this times
  /// the dense ring's bytes (decided at run time on the real counts).
  double sparse_max_ratio = 1.0;
  /// ZeRO stage: 0 plain data parallel; 1 shards the optimizer state (each
  /// parameter has one owner rank that keeps its state and updates it;
  /// gradients are reduce-scattered to the owners, the updated parameters
  /// all-gathered). The graph differs per rank then: `rank` says whose.
  int zero_stage = 0;
  /// The rank this graph is compiled for (only ZeRO-1 graphs depend on it).
  int rank = 0;
};

/// cross_entropy's options (kiln train --label-smoothing, --ignore-index,
/// --class-weights), with F.cross_entropy's meaning and defaults.
struct CrossEntropyOptions {
  double label_smoothing = 0.0;
  int64_t ignore_index = -100;
  /// One weight per class; empty: none. The loss pass reads them from the
  /// Const input kClassWeightsInput, which the front end adds to the model's
  /// weights (a pass has no tensor storage of its own).
  std::vector<double> class_weights;
  bool isDefault() const { return label_smoothing == 0.0 && ignore_index == -100 && class_weights.empty(); }
};
inline constexpr const char* kClassWeightsInput = "__const.loss.class_weights";

/// Selective backprop (passes/selective_backprop.h): the backward learns
/// from the `fraction` of each batch with the highest loss.
struct SelectiveBackpropOptions {
  double fraction = 0;  ///< 0: off
  /// The model's forward at the whole batch, which scores the examples (the
  /// graph the passes build from is the forward at the selected rows).
  std::shared_ptr<const Graph> scoring;
};

/// The rows selective backprop trains of a batch of `rows`: round(fraction x rows), at least 1.
inline int64_t selectedRows(double fraction, int64_t rows) {
  const auto k = static_cast<int64_t>(fraction * static_cast<double>(rows) + 0.5);
  return k < 1 ? 1 : k;
}

struct TrainingOptions {
  LossKind loss = LossKind::CrossEntropy;
  CrossEntropyOptions cross_entropy;
  /// Type of the `target` batch tensor (from the batch file); nullopt: the
  /// loss pass picks the natural one (see passes/loss.h).
  std::optional<TensorType> target;
  OptimizerOptions optimizer;
  /// Parameters (Param input names) that get no gradient and no update:
  /// the freeze pass removes that work (passes/freeze.h).
  std::set<std::string> frozen;
  /// Weight averaging (passes/ema.h): the decay of the parameters' moving
  /// average; 0: none.
  double ema_decay = 0;
  SelectiveBackpropOptions selective;
  /// Mixed precision (passes/amp.h): off by default.
  AmpOptions amp;
  /// Peak memory (bytes) the step must fit in; remat recomputes activations
  /// to get there (passes/remat.h). 0: no budget.
  uint64_t memory_budget = 0;
  DataParallelOptions data_parallel;
};

}  // namespace kiln
