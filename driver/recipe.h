// Training recipes: kiln train's time-to-quality options. A recipe is a
// schedule of changes to the compiled step (--freeze-schedule: more
// parameters frozen from a step on) and a held-out evaluation (--eval-data,
// --eval-every, --metric, --target).
//
// Each schedule point is a step compiled with other options: through the
// compile cache (so a second run, or a schedule that comes back to a shape,
// loads it instead of compiling), then the training state is carried over
// (TrainingSession::adoptState). The evaluation is the forward in eval mode
// (the eval_mode pass: running statistics, no dropout) with the loss and
// accuracy, compiled once as its own step; it takes the training weights
// before each evaluation and reads the evaluation set once through.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "driver/compile.h"
#include "driver/report_types.h"

namespace kiln::driver {

/// --freeze-schedule's entries: from `step` on, `pattern` is frozen too.
struct FreezePoint {
  int64_t step = 0;
  std::string pattern;
};

/// --resize-schedule's entries: from `step` on, images are `size` x `size`
/// (0: as the data holds them).
struct ResizePoint {
  int64_t step = 0;
  int64_t size = 0;
};

/// --seq-warmup START:STEPS: windows of `start` tokens at step 0, growing
/// linearly to `full` at step `steps`, rounded down to multiples of 8 (as
/// Composer's SeqLengthWarmup), never below `start`.
struct SeqWarmup {
  int64_t start = 0, steps = 0, full = 0;
  int64_t lengthAt(int64_t step) const;
};

/// The schedule of changes to the compiled step.
struct RecipeSchedule {
  std::vector<FreezePoint> freeze;  ///< by step
  std::vector<ResizePoint> resize;  ///< by step
  std::optional<SeqWarmup> seq_warmup;

  /// The options the step of training step `step` is compiled with.
  CompileOptions optionsAt(const CompileOptions& base, int64_t step) const;
  /// The steps after the first where the compiled step changes, ascending.
  std::vector<int64_t> changePoints() const;
  /// What changes at `step`, in words ("freeze layer1, layer2.0; seq_len 64").
  std::string changeAt(int64_t step) const;
};

/// The schedule of `a`'s recipe options; one-line errors naming the flag.
Result<RecipeSchedule> parseRecipeSchedule(const CompileOptions& a);

/// The evaluation's metric: --metric, else accuracy for cross_entropy, else loss.
std::string evalMetric(const CompileOptions& a);
/// Whether `value` of `metric` reaches `target` (accuracy upwards, loss and perplexity downwards).
bool reachesTarget(const std::string& metric, double value, double target);

/// The session's state_dict with every parameter and floating buffer
/// replaced by its moving average (--ema; passes/ema.h).
TensorMap averagedWeights(const TrainingSession& s);

/// The held-out evaluation: its own compiled step (TrainingGraphKind::Eval)
/// over --eval-data.
class Evaluator {
 public:
  /// Compile the evaluation step for training options `train` (its model,
  /// amp, loss without label smoothing or class weights, threads, device).
  static Result<std::unique_ptr<Evaluator>> create(const CompileOptions& train);
  /// Evaluate `state_dict`'s weights over the whole evaluation set.
  Result<ReportEvaluation> evaluate(const TensorMap& state_dict);
  int64_t batches() const { return batches_; }
  const BoundStep& step() const { return step_; }

 private:
  BoundStep step_;
  int64_t batches_ = 0;
  bool cross_entropy_ = false;
};

/// Runs a recipe beside the training loop (TrainLoopOptions::recipe).
class RecipeRunner {
 public:
  /// `base`: kiln train's options (checked); compiles the evaluation step
  /// when there is --eval-data.
  static Result<std::unique_ptr<RecipeRunner>> create(const CompileOptions& base);

  /// The options of the step to compile for training from step `step` on
  /// (the first step, or a resumed run's).
  CompileOptions optionsAt(int64_t step) const { return schedule_.optionsAt(base_, step); }
  /// Check the schedule against the compiled step `bound` (every pattern
  /// selects a parameter), which trains from step `step` on.
  Status start(const BoundStep& bound, int64_t step);
  /// Before training step `step`: at a schedule point, compile the step
  /// for it and carry the training state over into it (`bound` replaced).
  Status beforeStep(int64_t step, BoundStep& bound);
  /// After training step `step` (0-based; `last` is the run's last): evaluate
  /// when one is due. `train_seconds`: the training time so far, evaluations
  /// excluded. True when the target is reached (the run stops).
  Result<bool> afterStep(int64_t step, int64_t last, const BoundStep& bound, double train_seconds);

  double evalSeconds() const { return eval_seconds_; }
  bool evaluates() const { return evaluator_ != nullptr; }
  const Evaluator& evaluator() const { return *evaluator_; }  ///< evaluates() only
  /// Whether the compiled step changes during the run.
  bool hasSchedule() const { return has_schedule_; }
  /// Whether the run has anything of a recipe to do (evaluations or a schedule).
  bool active() const { return evaluates() || hasSchedule(); }
  const std::string& metric() const { return metric_; }
  const ReportRecipe& record() const { return record_; }

 private:
  CompileOptions base_;
  RecipeSchedule schedule_;
  std::vector<int64_t> points_;  ///< the change points still ahead
  bool has_schedule_ = false;    ///< any change points at all (points_ empties as they pass)
  std::unique_ptr<Evaluator> evaluator_;
  std::string metric_;
  double eval_seconds_ = 0;
  ReportRecipe record_;
};

}  // namespace kiln::driver
