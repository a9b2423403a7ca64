// Weight averaging (kiln train --ema DECAY): an exponential moving average
// of the parameters, kept as optimizer state and updated by the step graph.
#pragma once

#include <string>

#include "passes/pass.h"

namespace kiln {

/// Name of a parameter's moving average among the optimizer state: "ema.fc.weight".
std::string emaStateName(const std::string& param);

/// ema: with ctx.training.ema_decay d > 0, adds for every parameter and
/// floating-point buffer an OptState input ema.P and its OptStateUpdate
///   ema.P <- d' * ema.P + (1 - d') * P_new,   d' = 0 at the first step, else d,
/// where P_new is the parameter after this step's update (the parameter
/// itself when it is frozen), as torch.optim.swa_utils.AveragedModel with an
/// EMA avg_fn updates it after optimizer.step(): a copy at the first update,
/// then the average; floating buffers (running statistics) too, as
/// AveragedModel(use_buffers=True) does. Needs the optimizer (its `step`
/// counter) and freeze to have run. Statistics: params_averaged,
/// buffers_averaged.
Result<PassResult> runEma(Graph& g, PassContext& ctx);

}  // namespace kiln
