// Appending the training loss to a forward graph.
#pragma once

#include "passes/pass.h"

namespace kiln {

/// The loss pass. The forward's first plain output is the prediction.
///  - cross_entropy: adds a `target` Data input of class indices and a mean
///    cross-entropy. Layout: logits [N, C, d...] with target [N, d...]
///    (PyTorch's), or classes in the last dim: logits [N, T, V] with target
///    [N, T] (language models; flattened to [N*T, V] like GPT training code).
///    With ctx.training.target set, its shape decides (PyTorch's layout when
///    both fit); without, rank-3 logits use the last-dim layout, others
///    PyTorch's. Also adds an `accuracy` Metric output.
///  - mse: adds a float `target` of the prediction's shape; mean squared error.
///  - model: the prediction must already be the 0-d loss.
/// Other plain outputs are dropped (BufferUpdate outputs stay); the loss
/// becomes the Loss output "loss".
Result<PassResult> runLoss(Graph& g, PassContext& ctx);

}  // namespace kiln
