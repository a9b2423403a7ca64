// Compiling a model inside kiln-studio: the step `kiln compile` builds (the
// same options, from the same option table), with every pass's IR kept for
// the passes view, turned into the report `kiln compile --report
// --report-pass-ir` writes.
// It runs on a worker thread; progress comes back through a callback that
// can cancel between passes.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "core/result.h"
#include "driver/compile_options.h"
#include "driver/report_types.h"

namespace kiln::studio {

/// Told the stage ("importing", "pass 3 of 13: autodiff", "binding
/// kernels") and a percentage; returning false cancels at the next pass
/// boundary.
using CompileProgress = std::function<bool(int percent, const std::string& stage)>;

/// Compile the model `options.model.path` names (.pt or .fx.json) with
/// `options` (kiln compile's, from kiln-studio's command line) and return
/// its report. Errors are the one line kiln compile prints; "cancelled"
/// (ErrorKind::kCancelled) when `progress` said stop or `cancel` became
/// true, which the import also checks every few hundred nodes. Safe to
/// call from any thread.
Result<driver::Report> compileModelReport(driver::CompileOptions options, const CompileProgress& progress,
                                          const std::atomic<bool>* cancel = nullptr);

}  // namespace kiln::studio
