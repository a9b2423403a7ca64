// kiln train MODEL [--input-file B | --data D] --loss L --optimizer O --lr X
//                  --steps N [--save-weights W] [--log-file L.jsonl]
//                  [--checkpoint DIR [--checkpoint-every K] [--keep-checkpoints K]] [--resume DIR] [--report R.json]
//                  [--nproc N [--max-restarts K]]
// Builds the whole training step (forward, loss, backward, optimizer) as one
// graph and runs it N times. The loss is read back only every --log-every
// steps (and for the progress line on a terminal), never inside a step.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "backend/checkpoint.h"
#include "cli/commands.h"
#include "core/op_table.h"
#include "core/safetensors.h"
#include "driver/comm_report.h"
#include "driver/compile.h"
#include "driver/machine_roofs.h"
#include "driver/messages.h"
#include "driver/option_table.h"
#include "driver/ranks.h"
#include "driver/recipe.h"
#include "driver/report.h"
#include "driver/trainer.h"

namespace kiln::cli {
namespace {

struct TrainCmd {
  CompileOptions train;
  std::string save_weights, log_file, checkpoint, resume, report, trace;
  int64_t trace_steps = 3;
  int64_t checkpoint_every = 0;
  int keep_checkpoints = 1;
  int max_restarts = 0;
  int64_t log_every = 1;
  bool comm_table = false;  ///< kiln comm: print the communication table at the end
};

std::string fmt(double v, int prec = 4) {
  std::ostringstream s;
  s << std::setprecision(prec) << v;
  return s.str();
}

/// kiln train's observer: the log file's JSON lines and the progress line
/// on a terminal (which asks for the loss about five times a second).
class ProgressPrinter : public TrainObserver {
  using Clock = std::chrono::steady_clock;

 public:
  ProgressPrinter(bool tty, int64_t steps, int64_t start, std::ofstream* log)
      : tty_(tty), steps_(steps), start_(start), log_(log), t0_(Clock::now()), last_print_(t0_) {}

  bool wantsLoss(int64_t step) override {
    print_now_ =
        tty_ && (std::chrono::duration<double>(Clock::now() - last_print_).count() > 0.2 || step + 1 == steps_);
    return print_now_;
  }

  Status onStep(const StepRecord& r, bool, bool logged, const std::map<std::string, double>& metrics) override {
    if (logged && log_) {
      nlohmann::json j{{"step", r.step}, {"loss", r.loss}, {"lr", r.lr}};
      for (const auto& [k, v] : metrics) j[k] = v;
      *log_ << j.dump() << "\n";
      log_->flush();
    }
    if (print_now_) {
      const auto now = Clock::now();
      const double secs = std::chrono::duration<double>(now - t0_).count();
      std::fprintf(stderr, "\rstep %lld/%lld  loss %.4f", static_cast<long long>(r.step + 1),
                   static_cast<long long>(steps_), r.loss);
      if (auto it = metrics.find("accuracy"); it != metrics.end()) std::fprintf(stderr, "  accuracy %.3f", it->second);
      std::fprintf(stderr, "  %.1f steps/s   ", static_cast<double>(r.step + 1 - start_) / std::max(secs, 1e-9));
      last_print_ = now;
    }
    return {};
  }

  Status onEvaluation(const ReportEvaluation& e) override {
    if (tty_) std::fprintf(stderr, "\r\033[K");  // the progress line makes room
    if (log_) {
      nlohmann::json j{{"step", e.step}, {"eval_loss", e.loss}, {"train_seconds", e.train_seconds}};
      if (e.accuracy) j["eval_accuracy"] = *e.accuracy;
      if (e.perplexity) j["eval_perplexity"] = *e.perplexity;
      *log_ << j.dump() << "\n";
      log_->flush();
    }
    if (out_) {
      *out_ << "eval after step " << e.step << ": loss " << fmt(e.loss, 5);
      if (e.accuracy) *out_ << ", accuracy " << fmt(*e.accuracy, 4);
      if (e.perplexity) *out_ << ", perplexity " << fmt(*e.perplexity, 5);
      *out_ << " (" << fmt(e.eval_ms, 3) << " ms; " << fmt(e.train_seconds, 4) << " s of training)" << std::endl;
    }
    return {};
  }

  /// Where evaluation lines go (rank 0's stdout).
  void setOut(std::ostream* out) { out_ = out; }

  void finish() {
    if (tty_ && steps_ > start_) std::fprintf(stderr, "\n");
  }

 private:
  bool tty_;
  bool print_now_ = false;  ///< this step's progress line is due (decided before it read the loss)
  int64_t steps_, start_;
  std::ofstream* log_;
  std::ostream* out_ = nullptr;
  Clock::time_point t0_, last_print_;
};

/// The recipe's schedule points and its target, after the run.
void printRecipeSummary(std::ostream& out, const RecipeRunner& recipe, const TrainLoopResult& run) {
  const ReportRecipe& r = recipe.record();
  for (const ReportSchedulePoint& p : r.schedule)
    out << "schedule: step " << p.step << " " << p.change << ": " << p.nodes << "-node step, " << p.trainable_params
        << " trainable parameters (compiled in " << fmt(p.compile_ms, 3) << " ms, compile cache " << p.cache << ")\n";
  if (recipe.evaluates() && run.eval_seconds > 0)
    out << "evaluated " << r.evaluations.size() << " times in " << fmt(run.eval_seconds, 3)
        << " s (not counted as training time)\n";
  if (!r.target) return;
  const std::string goal = r.target->metric + (r.target->metric == "accuracy" ? " >= " : " <= ") +
                           fmt(r.target->value, 6);
  if (r.target->reached)
    out << "reached " << goal << " after " << *r.target->step << " steps and " << fmt(*r.target->train_seconds, 4)
        << " s of training\n";
  else
    out << "did not reach " << goal << " in " << run.steps_run << " steps\n";
}

int train(const TrainCmd& c) {
  if (shouldLaunch(c.train)) return launchRanks(c.train, {c.max_restarts, c.checkpoint});
  if (c.max_restarts != 0)
    return reportError(Error{"--max-restarts needs --nproc or --nnodes: the launcher restarts the ranks it starts "
                             "(under torchrun, use its --max-restarts)"});
  if (c.log_every < 1) return reportError(Error{"--log-every must be at least 1"});
  if (c.checkpoint_every < 0) return reportError(Error{"--checkpoint-every must be >= 0"});
  if (c.checkpoint_every > 0 && c.checkpoint.empty())
    return reportError(Error{"--checkpoint-every needs --checkpoint DIR"});
  if (c.keep_checkpoints < 1 || c.keep_checkpoints > 10000)
    return reportError(
        Error{"--keep-checkpoints must be between 1 and 10000, got " + std::to_string(c.keep_checkpoints)});
  if (!c.report.empty())
    if (Status st = checkReportPath(c.report); !st) return reportError(st.error());
  if (c.trace_steps < 1) return reportError(Error{"--trace-steps must be at least 1"});
  std::unique_ptr<TraceRecorder> trace;
  CompileOptions args = c.train;
  if (Status st = joinRanks(args); !st) return reportError(st.error());
  // Rank 0 speaks for a data-parallel run: it prints and writes the files.
  const bool lead = isLeadRank(args);
  if (!c.trace.empty() && lead)
    if (Status st = checkReportPath(c.trace); !st) return reportError(Error{"--trace: " + st.error().message});
  if ((!c.trace.empty() || !c.report.empty()) && lead) {  // the report keeps the trace as its timeline
    trace = std::make_unique<TraceRecorder>();
    args.trace = trace.get();
  }
  const auto t_start = std::chrono::steady_clock::now();
  // The recipe (evaluation, schedule); the step is compiled for the step the
  // run starts at (a resumed run's may have more frozen).
  auto recipe = RecipeRunner::create(args);
  if (!recipe) return reportError(recipe.error(), c.train.verbose);
  int64_t first_step = 0;
  if (!c.resume.empty() && (*recipe)->hasSchedule()) {
    auto done = checkpointStepsDone(c.resume);
    if (!done) return reportError(done.error());
    first_step = *done;
  }
  auto setup = compileStep((*recipe)->optionsAt(first_step), TrainingGraphKind::Step);
  if (!setup) return reportError(setup.error(), c.train.verbose);
  const double compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();
  TrainingSession& s = *setup->session;
  if (!c.resume.empty()) {
    if (Status st = s.loadCheckpoint(c.resume); !st) return reportError(st.error());
  }
  const int64_t start = s.stepsDone();
  const int64_t steps = c.train.steps;
  if (Status st = (*recipe)->start(*setup, start); !st) return reportError(st.error());

  std::ostream& out = lead ? std::cout : nullStream();
  out << "kiln train " << c.train.model.path << ": " << setup->num_params << " trainable parameters, step graph "
      << s.graph().numNodes() << " nodes (import " << fmt(setup->import_ms, 3) << " ms, compile "
      << fmt(setup->compile_ms, 3) << " ms, compile cache " << setup->cache.status
      << "); data: " << setup->batches->describe() << "\n";
  if (args.collectives) {
    int buckets = 0, sparse = 0, rows = 0, scattered = 0, gathers = 0;
    for (const auto& n : s.graph().nodes()) {
      const bool gradient_bucket = n->def().has(kCollective) && !n->is(Op::allgather) && !n->is(Op::broadcast);
      if (gradient_bucket && n->i("bucket") >= 0) ++buckets;
      if (n->is(Op::allreduce) && n->i("bucket") >= 0) sparse += n->i("sparse") != 0;
      rows += n->is(Op::allreduce_rows);
      scattered += n->is(Op::reduce_scatter);
      gathers += n->is(Op::allgather);
    }
    out << "data parallel: " << args.collectives->size() << " ranks (" << args.collectives->communicator().backend()
        << "), each on its 1/" << args.collectives->size() << " of every batch; " << buckets << " gradient buckets ("
        << rows << " row-sparse, " << sparse << " block-sparse)";
    if (scattered || gathers)
      out << "; ZeRO-1: optimizer state sharded, " << scattered << " reduce-scatters, " << gathers
          << " parameter all-gathers";
    out << "\n";
  }
  if (c.train.verbose)
    for (const PassTraceEntry& p : s.passTrace()) {
      out << "  pass " << std::left << std::setw(10) << p.pass << fmt(p.millis, 3) << " ms, " << p.nodes_after
          << " nodes";
      for (const auto& [k, v] : p.result.statistics) out << ", " << k << " " << v;
      out << "\n";
    }
  if (!c.resume.empty()) out << "resumed from " << c.resume << " at step " << start << "\n";

  std::ofstream log;
  if (!c.log_file.empty() && lead) {
    log.open(c.log_file, c.resume.empty() ? std::ios::trunc : std::ios::app);
    if (!log) return reportError(Error{c.log_file + ": cannot open the log file for writing"});
  }
  ProgressPrinter progress(lead && ::isatty(STDERR_FILENO), steps, start, log.is_open() ? &log : nullptr);
  progress.setOut(&out);
  TrainLoopOptions loop;
  loop.steps = steps;
  loop.log_every = c.log_every;
  loop.record_steps = !c.report.empty();
  loop.profile_nodes = !c.report.empty() && lead;
  loop.checkpoint_dir = c.checkpoint;
  loop.checkpoint_every = c.checkpoint_every;
  loop.keep_checkpoints = c.keep_checkpoints;
  loop.trace = trace.get();
  loop.trace_steps = c.trace_steps;
  if ((*recipe)->active()) loop.recipe = recipe->get();
  if ((*recipe)->evaluates())
    out << "evaluation: " << (*recipe)->evaluator().batches() << " batches of "
        << (*recipe)->evaluator().step().batches->describe() << ", " << (*recipe)->metric()
        << (c.train.target ? " to reach " + fmt(*c.train.target, 6) : std::string()) << "\n";
  auto run = runTraining(*setup, loop, progress);
  if (!run) return reportError(run.error(), c.train.verbose);
  progress.finish();
  TrainingSession& trained = *setup->session;  // a schedule point may have replaced the step
  const double secs = run->seconds;
  const double last_loss = run->last_loss;
  const auto& last_metrics = run->last_metrics;

  if (!c.checkpoint.empty())  // every rank: ZeRO-1 gathers the optimizer state; rank 0 writes
    if (Status st = trained.saveCheckpoint(c.checkpoint, c.keep_checkpoints); !st) return reportError(st.error());
  if (!lead) return 0;
  if (!c.report.empty()) {
    auto report = buildReport("train", c.train, *setup, compile_ms);
    addTrainingResult(report, *setup, *run, trace.get(), loop.recipe);
    addMachine(report, c.train.cache_dir);
    if (Status st = writeReport(c.report, report); !st) return reportError(st.error());
  }
  if (!c.save_weights.empty())
    if (Status st = writeSafetensors(c.save_weights, trained.stateDict()); !st) return reportError(st.error());
  if (!c.train.save_ema.empty())
    if (Status st = writeSafetensors(c.train.save_ema, averagedWeights(trained)); !st) return reportError(st.error());
  if (trace && !c.trace.empty()) {
    trace->stop();
    if (Status st = trace->write(c.trace); !st) return reportError(st.error());
    std::cout << "wrote a trace of " << std::min(c.trace_steps, steps - start) << " steps (" << trace->size()
              << " slices) to " << c.trace << " (open it in https://ui.perfetto.dev or chrome://tracing)\n";
  }

  std::cout << "trained " << run->steps_run << " steps in " << fmt(secs, 3) << " s ("
            << fmt(static_cast<double>(run->steps_run) / std::max(secs, 1e-9), 3) << " steps/s)";
  if (run->steps_run > 0) {
    std::cout << "; final loss " << fmt(last_loss, 6);
    for (const auto& [k, v] : last_metrics) std::cout << ", " << k << " " << fmt(v, 4);
  }
  std::cout << "\n";
  printRecipeSummary(std::cout, **recipe, *run);
  if (c.comm_table && args.collectives)
    printCommTable(std::cout, args.collectives->size(), args.collectives->communicator().backend(), run->comm);
  if (!c.save_weights.empty()) std::cout << "wrote weights to " << c.save_weights << "\n";
  if (!c.train.save_ema.empty()) std::cout << "wrote the averaged weights to " << c.train.save_ema << "\n";
  if (!c.report.empty()) std::cout << "wrote report to " << c.report << "\n";
  if (!c.checkpoint.empty())
    std::cout << "wrote checkpoint (step " << trained.stepsDone() << ") to " << c.checkpoint << "\n";
  return 0;
}

}  // namespace

void addTrainCommand(CLI::App& app) {
  auto c = std::make_shared<TrainCmd>();
  CLI::App* sub = app.add_subcommand("train", "train a model: forward, loss, backward and optimizer as one graph");
  addOptions(sub, c->train, kTrain);
  sub->add_option("--save-weights", c->save_weights, "write the trained state_dict (safetensors) here");
  sub->add_option("--log-file", c->log_file, "write one JSON object per logged step here (JSON lines)");
  sub->add_option("--log-every", c->log_every, "read the loss back every K steps (default 1)");
  sub->add_option("--checkpoint", c->checkpoint, "save weights and optimizer state in this directory (at the end)");
  sub->add_option("--checkpoint-every", c->checkpoint_every, "also save every K steps");
  sub->add_option("--keep-checkpoints", c->keep_checkpoints,
                  "keep the newest K checkpoints in the --checkpoint directory (default 1)");
  sub->add_option("--resume", c->resume, "continue from the latest checkpoint in this directory");
  sub->add_option("--max-restarts", c->max_restarts,
                  "data parallel: when a rank fails, stop the others and restart them all from the latest "
                  "--checkpoint, at most K times (default 0)");
  sub->add_option("--trace", c->trace,
                  "write a Chrome trace-event file (Perfetto, chrome://tracing) of the first steps: a slice per "
                  "node with its op, kernel and bytes, the data loading on its own row");
  sub->add_option("--trace-steps", c->trace_steps, "how many steps --trace records (default 3)");
  CLI::Option* report = sub->add_option("--report", c->report,
                                        "write the compile report plus every step's loss and time (JSON, "
                                        "docs/report-schema.md); reads the loss back every step");
  sub->get_option("--report-pass-ir")->needs(report);
  sub->callback([c] {
    int rc = train(*c);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

void addCommCommand(CLI::App& app) {
  auto c = std::make_shared<TrainCmd>();
  c->comm_table = true;
  c->train.steps = 3;
  c->train.nproc = 2;
  CLI::App* sub = app.add_subcommand(
      "comm", "train a few data-parallel steps and print what each gradient bucket's collective moved and hid");
  addOptions(sub, c->train, kComm);
  sub->get_option("--steps")->description("steps to train and measure (default 3)");
  sub->get_option("--nproc")->description("ranks to start (default 2)");
  sub->add_option("--report", c->report, "also write the report with every step's collectives (JSON)");
  sub->callback([c] {
    if (c->train.nproc < 2) throw CLI::ValidationError("--nproc", "kiln comm needs at least 2 ranks");
    int rc = train(*c);
    if (rc) throw CLI::RuntimeError(rc);
  });
}

}  // namespace kiln::cli
