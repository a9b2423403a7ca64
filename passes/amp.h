// The amp pass: automatic mixed precision, like torch.autocast plus
// torch.cuda.amp.GradScaler, as graph rewrites.
#pragma once

#include <optional>
#include <vector>

#include "passes/pass.h"

namespace kiln {

/// OptState f32[] input holding the fp16 loss scale; 0 means "not started":
/// the step then uses AmpOptions::init_scale (GradScaler creates its scale
/// lazily too), so zero-initialized optimizer state needs no special case.
inline constexpr const char* kLossScaleInput = "amp.loss_scale";
/// OptState f32[] input: good steps since the scale last changed.
inline constexpr const char* kGrowthTrackerInput = "amp.growth_tracker";
/// Metric output: the loss scale this step used. Autodiff seeds the
/// backward with it instead of 1 (passes/autodiff.cpp).
inline constexpr const char* kLossScaleMetric = "loss_scale";

/// Rewrites every op by the policy of passes/amp_policy.h for
/// ctx.training.amp.mode (nothing for None):
///  - Lower ops (matmul, linear, conv2d) get their f32 inputs cast to
///    bf16/f16, so they compute and return low precision;
///  - Fp32 ops (softmax, norms, reductions, losses, exp/log, ...) get their
///    bf16/f16 inputs cast to f32;
///  - every other node's output types are re-inferred, so elementwise ops
///    after a low-precision op run in low precision, and ops mixing
///    precisions promote to the widest.
/// One cast per (value, dtype): a parameter used twice is cast once (the
/// autocast weight cache). Parameters stay f32 graph inputs (the master
/// weights) and graph outputs keep their types (a cast back is added where
/// needed), so gradients and updates stay f32; autodiff differentiates
/// through the casts, whose gradient rule casts the gradient back.
/// With fp16 loss scaling (AmpOptions::scalesLoss) the graph must have its
/// Loss output: the pass adds the kLossScaleInput state and the
/// kLossScaleMetric output that autodiff and the optimizer use.
/// Ops with f64 inputs are left alone (autocast does not touch f64).
/// Statistics: casts_added, ops_lowered, ops_kept_f32.
Result<PassResult> runAmp(Graph& g, PassContext& ctx);

/// What the optimizer pass needs from the loss scaler.
struct LossScaleStep {
  Value* found_inf;  ///< bool[]: some gradient is inf or NaN; the step is skipped
  Value* inv_scale;  ///< f32[]: 1 / scale, +inf on a skipped step
};

/// Called by the optimizer pass with the (scaled) gradients: when the graph
/// has the kLossScaleInput state, adds the found-inf check, 1/scale, and
/// GradScaler.update() as graph ops -- backoff on inf/NaN, growth after
/// growth_interval good steps (kGrowthTrackerInput state), never to an
/// infinite scale -- with OptStateUpdate outputs for both states. Nothing
/// is read on the host. nullopt when the graph does not scale its loss.
std::optional<LossScaleStep> addLossScaleUpdate(Graph& g, const std::vector<Value*>& grads, const AmpOptions& options);

}  // namespace kiln
