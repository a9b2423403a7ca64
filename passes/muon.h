// Muon (kiln train --optimizer muon): momentum orthogonalized by
// Newton-Schulz for the hidden weight matrices, AdamW for the rest, as
// graph ops the optimizer pass (passes/optimizer.h) adds per matrix.
#pragma once

#include "passes/training_options.h"

namespace kiln {

class Graph;
class Value;

/// Scalar f64[] input of a Muon step: Muon's learning rate this step (the
/// host's --muon-lr under the same schedule as `lr`).
inline constexpr const char* kMuonLearningRateInput = "muon_lr";

/// Whether Muon trains parameter `p`: a floating-point matrix (2-D, as
/// torch.optim.Muon takes) that no embedding reads. Embedding tables, and
/// an output layer tied to one (GPT's), train with AdamW, as in Keller
/// Jordan's and Moonshot's recipes; so do vectors (biases, norms' gains) and
/// convolution kernels (4-D).
bool trainsWithMuon(const Value& p);

struct MuonUpdate {
  Value* param;            ///< the parameter after this step
  Value* momentum_buffer;  ///< its momentum buffer after this step
};

/// torch.optim.Muon's step for one matrix `p` (defaults: nesterov, the
/// quintic Newton-Schulz iteration (3.4445, -4.7750, 2.0315) x 5 with eps
/// 1e-7, adjust_lr_fn "original"), in its order:
///   g = grad * grad_scale (when given: the clipping coefficient)
///   buf' = lerp(buf, g, 1 - momentum);  u = lerp(g, buf', momentum)
///   O = NS(u) in bfloat16 (float64 for a float64 matrix), on u^T when
///       rows > cols, after dividing by its Frobenius norm + eps
///   p' = p * (1 - lr * weight_decay) - lr * sqrt(max(1, rows / cols)) * O
/// `lr` is the muon_lr input (f64[]). Every op is an existing graph op, so
/// every backend runs it and the simplify/fuse passes see it.
MuonUpdate addMuonUpdate(Graph& g, Value* p, Value* grad, Value* buf, Value* lr, Value* grad_scale,
                         const OptimizerOptions& o);

}  // namespace kiln
