// Selective backprop (kiln train --selective-backprop FRACTION): the forward
// scores the whole batch, the backward learns from its hardest examples only.
#pragma once

#include "passes/pass.h"

namespace kiln {

/// selective_backprop: needs the loss pass on a forward traced at the
/// selected batch size k (its Data inputs and target have k rows), and
/// ctx.training.selective.scoring, the same model's forward at the whole
/// batch N (its Data inputs have N rows). Rebuilds the graph as: the scoring
/// forward on the whole batch (the graph's Data inputs and target now have N
/// rows), each example's loss (the training loss with reduction "none",
/// averaged over an example's other dims), the top k of them (a static
/// topk), the batch's rows at those indices (index along dim 0), and the
/// training forward and loss on them. Nothing differentiates through the
/// scoring forward (its outputs reach the loss only through integer
/// indices), so autodiff builds a backward over k examples; the scoring
/// forward's BatchNorm statistics are not kept (only the training forward's
/// are). Statistics: examples_scored, examples_trained.
Result<PassResult> runSelectiveBackprop(Graph& g, PassContext& ctx);

}  // namespace kiln
