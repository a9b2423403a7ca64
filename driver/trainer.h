// The training loop every front end runs over a bound step (compileStep):
// batches from its source, the loss read back only when someone needs it (a
// log line, a progress line, the report: reading it is the step's only
// sync), checkpoints at their cadence, the nodes' measured times and the
// collectives' records for the report, and a trace of the first steps. An
// observer hears of every step (printing, logging) and can stop the run.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/result.h"
#include "core/trace.h"
#include "driver/comm_report.h"
#include "driver/compile.h"
#include "driver/report.h"

namespace kiln::driver {
class RecipeRunner;
}

namespace kiln::driver {

struct TrainLoopOptions {
  int64_t steps = 10;         ///< train until this many steps are done (a resumed session has some)
  int64_t log_every = 1;      ///< read the loss every K steps, and at the last
  bool record_steps = false;  ///< keep every step's loss, time and lr (reads the loss every step): the report's
  bool profile_nodes = false;  ///< time every node of the steps after the first (the CPU executor)
  std::string checkpoint_dir;  ///< with checkpoint_every: save there every K steps (not after the last)
  int64_t checkpoint_every = 0;
  int keep_checkpoints = 1;  ///< the newest checkpoints checkpoint_dir keeps
  /// Record the first trace_steps steps (the calling thread's row is the executor's).
  TraceRecorder* trace = nullptr;
  int64_t trace_steps = 3;
  /// A recipe (driver/recipe.h): its schedule points switch the bound step
  /// before their step, its evaluations run after the steps they are due
  /// (their time is not the training's) and reaching its target stops the run.
  RecipeRunner* recipe = nullptr;
};

/// What the loop tells about each step; every method has a default.
class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  /// Whether step `step`'s loss is wanted besides the loop's own reads (a
  /// progress line is due).
  virtual bool wantsLoss(int64_t /*step*/) { return false; }
  /// After each step. `loss_read`: the loss and metrics are this step's
  /// (else they are the last read); `logged`: a log_every step. An error
  /// stops the run with it.
  virtual Status onStep(const StepRecord& /*record*/, bool /*loss_read*/, bool /*logged*/,
                        const std::map<std::string, double>& /*metrics*/) {
    return {};
  }
  /// After each evaluation of the recipe (TrainLoopOptions::recipe).
  virtual Status onEvaluation(const ReportEvaluation& /*evaluation*/) { return {}; }
  /// Asked before each step; false stops the run (a Cancel).
  virtual bool keepGoing() { return true; }
};

struct TrainLoopResult {
  int64_t first_step = 0;  ///< the steps done before (a resumed run)
  int64_t steps_run = 0;
  double seconds = 0;       ///< training wall time, evaluations excluded
  double eval_seconds = 0;  ///< the recipe's evaluations
  bool reached_target = false;  ///< the recipe's target stopped the run
  double last_loss = NAN;
  std::map<std::string, double> last_metrics;
  std::vector<StepRecord> records;  ///< record_steps
  std::vector<CommStep> comm;       ///< data parallel: every step's collectives
  int64_t profiled_steps = 0;       ///< steps summed in the nodes' measured times
  bool stopped = false;             ///< the observer stopped it
};

/// Train `step` (from its batch source) until `o.steps` steps are done. A
/// recipe's schedule point replaces `step` by the step compiled for it.
Result<TrainLoopResult> runTraining(BoundStep& step, const TrainLoopOptions& o, TrainObserver& observer);

/// Add what the run measured to a report of the step: the steps, the nodes'
/// measured times, the communication, and with `trace` (the loop's) the
/// timeline of the steps it recorded, and the recipe's schedule and evaluations.
void addTrainingResult(Report& report, const BoundStep& step, const TrainLoopResult& result,
                       const TraceRecorder* trace = nullptr, const RecipeRunner* recipe = nullptr);

}  // namespace kiln::driver
