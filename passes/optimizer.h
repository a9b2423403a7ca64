// The optimizer pass: parameter updates as graph ops.
#pragma once

#include "passes/pass.h"

namespace kiln {

/// Graph inputs the optimizer pass adds (besides per-parameter state).
inline constexpr const char* kLearningRateInput = "lr";  ///< Scalar f64[]: set by the host each step
inline constexpr const char* kStepInput = "step";        ///< OptState f64[]: steps taken so far

/// Name of a parameter's optimizer state tensor, e.g. "exp_avg.fc.weight".
std::string optimizerStateName(const std::string& kind, const std::string& param);

/// Consumes the Gradient outputs (from autodiff) and adds one multi-tensor
/// update node (sgd_update / adam_update) for all of them, with
///  - OptState inputs: `step`, and per parameter `momentum_buffer.P` (SGD
///    with momentum) or `exp_avg.P` and `exp_avg_sq.P` (Adam/AdamW), all
///    zero-initialized; a Scalar input `lr`;
///  - with clip_grad_norm > 0: a global_norm over the gradients, the
///    clipping coefficient min(1, max_norm / (norm + 1e-6)) as in
///    torch.nn.utils.clip_grad_norm_, and a Metric output `grad_norm`;
///  - ParamUpdate outputs named like each parameter, OptStateUpdate outputs
///    named like each state input (and `step` + 1);
///  - with amp's fp16 loss scale (passes/amp.h): the unscaling folded into
///    grad_scale, GradScaler's scale update, and skip_nonfinite=1 on the
///    update so a step with an inf/NaN gradient changes nothing (`step`
///    does not advance either).
///  - under ZeRO-1 (ctx.zero_plan, made by data_parallel): the update covers
///    only this rank's parameters (and only they have optimizer state here);
///    clipping sums the ranks' squared partial norms with an allreduce; and
///    allgather nodes give every rank every updated parameter, which the
///    ParamUpdate outputs then are. A rank that owns nothing has no update.
///  - Muon (OptimizerKind::Muon): the matrices trainsWithMuon picks get
///    per-parameter graph ops instead (passes/muon.h), with state
///    `momentum_buffer.P` and the Scalar input `muon_lr`; the other
///    parameters get the AdamW update node.
/// The Gradient outputs are removed. Statistics: params_updated (and
/// params_muon under Muon).
Result<PassResult> runOptimizer(Graph& g, PassContext& ctx);

}  // namespace kiln
