// Building the whole training step from a forward graph: the default
// training pipeline (passes/pipelines.h) run by the PassManager, with a
// trace of what each pass did.
#pragma once

#include <vector>

#include "core/ir.h"
#include "passes/pass.h"
#include "passes/pass_manager.h"
#include "passes/pipelines.h"

namespace kiln {

/// Clone `forward` and run the default training pipeline of `kind` on it
/// (passes/pipelines.cpp), or `pipeline` when it is not empty (`--passes`),
/// verifying after each pass unless `options` says otherwise. Errors say
/// which pass failed and why.
Result<Graph> buildTrainingGraph(const Graph& forward, PassContext& ctx, TrainingGraphKind kind,
                                 std::vector<PassTraceEntry>* trace = nullptr,
                                 const PassManagerOptions& options = {.verify_each = true},
                                 const std::vector<const PassInfo*>& pipeline = {});

}  // namespace kiln
