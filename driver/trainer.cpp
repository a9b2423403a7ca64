#include "driver/trainer.h"

#include <chrono>
#include <iostream>

#include "backend/comm/collective_engine.h"
#include "backend/fault_injection.h"
#include "driver/recipe.h"
#include "driver/timeline.h"

namespace kiln::driver {

namespace {

/// The step's collectives on the trace's "communication" row, from when the
/// communication thread took each up to when its outputs were complete.
void traceCollectives(TraceRecorder* trace, TraceRecorder::Clock::time_point origin,
                      const std::vector<CollectiveRecord>& records) {
  if (!trace || !trace->recording()) return;
  auto at = [&](double ms) {
    return origin + std::chrono::duration_cast<TraceRecorder::Clock::duration>(
                        std::chrono::duration<double, std::milli>(ms));
  };
  for (const CollectiveRecord& c : records)
    trace->sliceOnRow("communication", "comm", c.bucket < 0 ? "loss" : "bucket " + std::to_string(c.bucket),
                      "comm", at(c.begin_ms), at(c.end_ms),
                      {{"node", c.node},
                       {"collective", c.collective},
                       {"algorithm", c.algorithm},
                       {"bytes", std::to_string(c.sent_bytes)},
                       {"queued_ms", std::to_string(c.begin_ms - c.start_ms)},
                       {"waited_ms", std::to_string(c.waited_ms)}});
}

}  // namespace

Result<TrainLoopResult> runTraining(BoundStep& step, const TrainLoopOptions& o, TrainObserver& observer) {
  using Clock = std::chrono::steady_clock;
  CollectiveEngine* collectives = step.session->config().collectives.get();
  TrainLoopResult r;
  r.first_step = step.session->stepsDone();
  step.session->setTrace(o.trace);
  if (o.trace) o.trace->nameThread("main (executor)", "executor");
  int64_t profile_from = r.first_step;  // the first step of the session whose nodes are timed
  const int64_t fault_delay = fault::millis("KILN_FAULT_STEP_DELAY_MS");  // tests: ranks drifting apart
  const auto t0 = Clock::now();
  for (int64_t i = r.first_step; i < o.steps; ++i) {
    if (!observer.keepGoing()) {
      r.stopped = true;
      break;
    }
    if (o.trace && i - r.first_step == o.trace_steps) o.trace->stop();  // a few steps show where time goes
    if (o.recipe) {
      const TrainingSession* before = step.session.get();
      if (Status st = o.recipe->beforeStep(i, step); !st) return st.error();
      if (step.session.get() != before) {  // a schedule point: another step, other nodes to time
        step.session->setTrace(o.trace);
        profile_from = i;
        r.profiled_steps = 0;
      }
    }
    TrainingSession& s = *step.session;
    TraceScope step_slice(o.trace, "step " + std::to_string(i), "step", {{"step", std::to_string(i)}});
    auto batch = step.batches->batch(i);
    if (!batch) return batch.error();
    if (i > 0 && !step.fixed_batch)  // the first batch was checked when compiling
      if (Status st = s.checkBatch(*batch, step.batch_where + " (step " + std::to_string(i) + ")"); !st)
        return st.error();
    const double lr = s.nextLr();
    if (fault_delay > 0) fault::sleepMillis(fault::stepDelay(fault_delay, collectives ? collectives->rank() : 0, i));
    const auto step_t0 = Clock::now();
    if (Status st = s.step(*batch); !st) return st.error();
    const double step_ms = std::chrono::duration<double, std::milli>(Clock::now() - step_t0).count();
    if (collectives) {
      r.comm.push_back({i, step_ms, collectives->takeRecords()});
      traceCollectives(o.trace, collectives->stepOrigin(), r.comm.back().collectives);
    }
    // Node times of the steps after the first, which pays for first-touch
    // allocation and warm-up.
    // Not where profiled runs run otherwise (a device's node by node): the
    // steps trained are what the run is for.
    if (o.profile_nodes && !s.executor().profilingChangesRuns()) {
      if (i != profile_from)
        ++r.profiled_steps;
      else if (Status st = s.executor().setProfiling(true); !st)
        return st.error();
    }
    const bool logged = (i - r.first_step) % o.log_every == 0 || i + 1 == o.steps;
    const bool wanted = observer.wantsLoss(i);  // asked every step: the observer decides its own output
    const bool read = logged || o.record_steps || wanted;
    if (read) {  // the only reads of device values
      auto loss = s.readLoss();
      if (!loss) return loss.error();
      r.last_loss = *loss;
      r.last_metrics = s.readMetrics();
      if (!std::isfinite(r.last_loss))
        std::cerr << "kiln: warning: loss is " << r.last_loss << " at step " << i << "\n";
    }
    const StepRecord record{i, r.last_loss, step_ms, lr};
    if (o.record_steps) r.records.push_back(record);
    ++r.steps_run;
    if (Status st = observer.onStep(record, read, logged, r.last_metrics); !st) return st.error();
    if (o.checkpoint_every > 0 && (i + 1) % o.checkpoint_every == 0 && i + 1 != o.steps)  // rank 0 writes
      if (Status st = s.saveCheckpoint(o.checkpoint_dir, o.keep_checkpoints); !st) return st.error();
    if (o.recipe) {
      const double trained = std::chrono::duration<double>(Clock::now() - t0).count() - o.recipe->evalSeconds();
      const size_t evaluated = o.recipe->record().evaluations.size();
      auto reached = o.recipe->afterStep(i, o.steps - 1, step, trained);
      if (!reached) return reached.error();
      if (o.recipe->record().evaluations.size() > evaluated)
        if (Status st = observer.onEvaluation(o.recipe->record().evaluations.back()); !st) return st.error();
      if (*reached) {
        r.reached_target = r.stopped = true;
        break;
      }
    }
  }
  r.eval_seconds = o.recipe ? o.recipe->evalSeconds() : 0;
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count() - r.eval_seconds;
  return r;
}

void addTrainingResult(Report& report, const BoundStep& step, const TrainLoopResult& result,
                       const TraceRecorder* trace, const RecipeRunner* recipe) {
  const TrainingSession& s = *step.session;
  addSteps(report, result.records);
  if (result.profiled_steps > 0) addNodeTimes(report, s.executor().nodeMillis(), result.profiled_steps);
  if (CollectiveEngine* c = s.config().collectives.get())
    addCommunication(report, c->size(), c->communicator().backend(), result.comm);
  if (trace) report.timeline = timelineFromTrace(*trace, s.executor().threads());
  if (recipe) report.recipe = recipe->record();
}

}  // namespace kiln::driver
