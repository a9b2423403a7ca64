#include "driver/recipe.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <set>

#include "core/import/recorded_inputs.h"
#include "driver/training_options.h"
#include "passes/ema.h"
#include "passes/freeze.h"

namespace kiln::driver {
namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

bool isCount(const std::string& s) {
  return !s.empty() && s.size() < 16 && std::ranges::all_of(s, [](char c) { return c >= '0' && c <= '9'; });
}

/// "A:B,A:B" -> its (A, B) entries, A a step number; `what` describes an
/// entry for the error ("STEP:PATTERN (...)").
Result<std::vector<std::pair<int64_t, std::string>>> parseStepList(const std::string& text, const std::string& flag,
                                                                   const std::string& what) {
  std::vector<std::pair<int64_t, std::string>> out;
  if (text.empty()) return out;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string entry = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t colon = entry.find(':');
    if (colon == std::string::npos || !isCount(entry.substr(0, colon)) || colon + 1 == entry.size())
      return Error{flag + ": '" + entry + "' is not " + what};
    out.emplace_back(std::stoll(entry.substr(0, colon)), entry.substr(colon + 1));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::ranges::stable_sort(out, {}, &std::pair<int64_t, std::string>::first);
  return out;
}

/// The full window length a --seq-warmup grows to: --seq-len, else the
/// model's recorded input length.
Result<int64_t> fullSeqLen(const CompileOptions& a) {
  if (a.seq_len > 0) return a.seq_len;
  if (auto types = recordedInputTypes(a.model.path); types && types->size() == 1 && (*types)[0].rank() == 2)
    return (*types)[0].shape[1];
  return Error{"--seq-warmup: give --seq-len (the length it grows to); " + a.model.path +
               " records no [batch, seq] input length"};
}

}  // namespace

int64_t SeqWarmup::lengthAt(int64_t step) const {
  if (step >= steps) return full;
  const double grown = static_cast<double>(start) + static_cast<double>(full - start) * static_cast<double>(step) /
                                                        static_cast<double>(steps);
  const int64_t len = 8 * static_cast<int64_t>(grown / 8);
  return std::clamp<int64_t>(len, start, full);
}

CompileOptions RecipeSchedule::optionsAt(const CompileOptions& base, int64_t step) const {
  CompileOptions o = base;
  for (const FreezePoint& f : freeze)
    if (f.step <= step && std::ranges::find(o.freeze, f.pattern) == o.freeze.end()) o.freeze.push_back(f.pattern);
  for (const ResizePoint& r : resize)
    if (r.step <= step) o.image_size = r.size;
  if (seq_warmup) o.seq_len = seq_warmup->lengthAt(step);
  return o;
}

std::vector<int64_t> RecipeSchedule::changePoints() const {
  std::set<int64_t> points;
  for (const FreezePoint& f : freeze)
    if (f.step > 0) points.insert(f.step);
  for (const ResizePoint& r : resize)
    if (r.step > 0) points.insert(r.step);
  if (seq_warmup)
    for (int64_t s = 1; s <= seq_warmup->steps; ++s)
      if (seq_warmup->lengthAt(s) != seq_warmup->lengthAt(s - 1)) points.insert(s);
  return {points.begin(), points.end()};
}

std::string RecipeSchedule::changeAt(int64_t step) const {
  std::string frozen, out;
  for (const FreezePoint& f : freeze)
    if (f.step == step) frozen += (frozen.empty() ? "freeze " : ", ") + f.pattern;
  auto add = [&](const std::string& part) { out += (out.empty() ? "" : "; ") + part; };
  if (!frozen.empty()) add(frozen);
  for (const ResizePoint& r : resize)
    if (r.step == step) add(r.size > 0 ? "images " + std::to_string(r.size) + "x" + std::to_string(r.size)
                                       : "images at the data's size");
  if (seq_warmup && step > 0 && seq_warmup->lengthAt(step) != seq_warmup->lengthAt(step - 1))
    add("seq_len " + std::to_string(seq_warmup->lengthAt(step)));
  return out;
}

Result<RecipeSchedule> parseRecipeSchedule(const CompileOptions& a) {
  RecipeSchedule s;
  auto freeze = parseStepList(a.freeze_schedule, "--freeze-schedule",
                              "STEP:PATTERN (a step number, a colon, and a parameter pattern as --freeze takes it)");
  if (!freeze) return freeze.error();
  for (auto& [step, pattern] : *freeze) s.freeze.push_back({step, pattern});
  auto resize = parseStepList(a.resize_schedule, "--resize-schedule",
                              "STEP:SIZE (a step number, a colon, and an image size; 0: the data's own)");
  if (!resize) return resize.error();
  for (auto& [step, size] : *resize) {
    if (!isCount(size) || std::stoll(size) > 65536)
      return Error{"--resize-schedule: '" + std::to_string(step) + ":" + size +
                   "' is not STEP:SIZE (a size up to 65536)"};
    s.resize.push_back({step, std::stoll(size)});
  }
  if (!s.resize.empty() && a.image_size > 0)
    return Error{"give either --image-size or --resize-schedule (whose sizes replace it), not both"};
  if (!a.seq_warmup.empty()) {
    const size_t colon = a.seq_warmup.find(':');
    const std::string start = a.seq_warmup.substr(0, colon);
    const std::string steps = colon == std::string::npos ? "" : a.seq_warmup.substr(colon + 1);
    if (!isCount(start) || !isCount(steps) || std::stoll(start) < 1)
      return Error{"--seq-warmup: '" + a.seq_warmup + "' is not START:STEPS (a first window length >= 1, a colon, "
                   "and the step by which windows reach the full length)"};
    if (a.data.empty() || std::filesystem::is_directory(a.data))
      return Error{"--seq-warmup cuts the windows of a token file: give --data FILE (a flat token file)"};
    auto full = fullSeqLen(a);
    if (!full) return full.error();
    s.seq_warmup = SeqWarmup{std::stoll(start), std::stoll(steps), *full};
    if (s.seq_warmup->start > *full)
      return Error{"--seq-warmup: the first windows (" + start + " tokens) are longer than the full length (" +
                   std::to_string(*full) + ")"};
  }
  return s;
}

std::string evalMetric(const CompileOptions& a) {
  if (!a.metric.empty()) return a.metric;
  return a.loss == "cross_entropy" ? "accuracy" : "loss";
}

bool reachesTarget(const std::string& metric, double value, double target) {
  return metric == "accuracy" ? value >= target : value <= target;
}

TensorMap averagedWeights(const TrainingSession& s) {
  TensorMap sd = s.stateDict();
  const TensorMap opt = s.optimizerState();
  for (const Value* v : s.graph().inputs())
    if (v->role() == ValueRole::Param || v->role() == ValueRole::Buffer)
      if (auto it = opt.find(emaStateName(v->name())); it != opt.end()) sd[v->name()] = it->second;
  for (const auto& [alias, target] : s.aliases())
    if (sd.count(target)) sd[alias] = sd.at(target);
  return sd;
}

// ---------------------------------------------------------------------------
// Evaluator

Result<std::unique_ptr<Evaluator>> Evaluator::create(const CompileOptions& train) {
  CompileOptions a = train;
  a.data = train.eval_data;
  a.model.input_file.clear();  // the evaluation's batches are --eval-data's
  a.prefetch = 0;              // read once through per evaluation, in order
  a.trace = nullptr;
  a.pass_flags = {};  // its own default pipeline; IR printing and dumps are the training step's
  a.keep_pass_ir = false;
  a.freeze.clear();
  a.freeze_schedule.clear();
  a.selective_backprop = 0;  // training-step options: the evaluation step is the same without them
  a.ema = 0;
  a.save_ema.clear();
  // The held-out loss is the plain cross-entropy, as a PyTorch evaluation
  // loop computes it (F.cross_entropy without smoothing or class weights).
  a.label_smoothing = 0;
  a.class_weights.clear();
  // Every rank of a data-parallel run evaluates the whole set on its own
  // (the same weights: the same numbers, so every rank stops together).
  a.nproc = a.nnodes = 1;
  a.collectives = nullptr;
  a.zero = 0;
  auto step = compileStep(a, TrainingGraphKind::Eval);
  if (!step) return step.error().prefixed("--eval-data: ");
  std::unique_ptr<Evaluator> e(new Evaluator());
  e->step_ = std::move(*step);
  e->batches_ = std::max<int64_t>(1, e->step_.batches->epochBatches());
  e->cross_entropy_ = train.loss == "cross_entropy";
  const std::string metric = evalMetric(train);
  const bool has_accuracy = std::ranges::any_of(e->step_.session->graph().outputs(), [](const GraphOutput& o) {
    return o.role == OutputRole::Metric && o.name == "accuracy";
  });
  if (metric == "accuracy" && !has_accuracy)
    return Error{"--metric accuracy needs a classification loss (--loss cross_entropy); use --metric loss"};
  if (metric == "perplexity" && !e->cross_entropy_)
    return Error{"--metric perplexity needs --loss cross_entropy; use --metric loss"};
  return e;
}

Result<ReportEvaluation> Evaluator::evaluate(const TensorMap& state_dict) {
  const auto t0 = Clock::now();
  TrainingSession& s = *step_.session;
  if (Status st = s.setWeights(state_dict); !st) return st.error().prefixed("evaluation: ");
  double loss = 0, accuracy = 0;
  bool has_accuracy = false;
  for (int64_t j = 0; j < batches_; ++j) {
    auto batch = step_.batches->batch(j);
    if (!batch) return batch.error().prefixed("--eval-data: ");
    if (j > 0)  // the first was checked when compiling
      if (Status st = s.checkBatch(*batch, step_.batch_where + " (evaluation batch " + std::to_string(j) + ")"); !st)
        return st.error();
    if (Status st = s.step(*batch); !st) return st.error().prefixed("evaluation: ");
    auto l = s.readLoss();
    if (!l) return l.error().prefixed("evaluation: ");
    loss += *l;
    const auto metrics = s.readMetrics();
    if (auto it = metrics.find("accuracy"); it != metrics.end()) {
      accuracy += it->second;
      has_accuracy = true;
    }
  }
  ReportEvaluation r;
  r.loss = loss / static_cast<double>(batches_);
  if (has_accuracy) r.accuracy = accuracy / static_cast<double>(batches_);
  if (cross_entropy_) r.perplexity = std::exp(r.loss);
  r.eval_ms = msSince(t0);
  return r;
}

// ---------------------------------------------------------------------------
// RecipeRunner

Result<std::unique_ptr<RecipeRunner>> RecipeRunner::create(const CompileOptions& base) {
  if (Status st = validateOptions(base); !st) return st.error();
  auto schedule = parseRecipeSchedule(base);
  if (!schedule) return schedule.error();
  std::unique_ptr<RecipeRunner> r(new RecipeRunner());
  r->base_ = base;
  r->schedule_ = std::move(*schedule);
  r->points_ = r->schedule_.changePoints();
  r->has_schedule_ = !r->points_.empty();
  r->metric_ = evalMetric(base);
  if (!base.eval_data.empty()) {
    auto e = Evaluator::create(base);
    if (!e) return e.error();
    r->evaluator_ = std::move(*e);
  }
  if (base.target) r->record_.target = ReportTarget{r->metric_, *base.target, false, std::nullopt, std::nullopt};
  return r;
}

Status RecipeRunner::start(const BoundStep& bound, int64_t step) {
  if (!schedule_.freeze.empty()) {
    std::vector<std::string> params;
    for (const Value* v : bound.session->graph().inputs())
      if (v->role() == ValueRole::Param) params.push_back(v->name());
    for (const FreezePoint& f : schedule_.freeze)
      if (auto ok = resolveFreezePatterns({f.pattern}, params, bound.session->aliases()); !ok)
        return Error{"--freeze-schedule " + std::to_string(f.step) + ":" + f.pattern + ": " + ok.error().message};
  }
  // The points before the first step are in the step compiled for it.
  std::erase_if(points_, [&](int64_t p) { return p <= step; });
  return {};
}

Status RecipeRunner::beforeStep(int64_t step, BoundStep& bound) {
  if (points_.empty() || points_.front() != step) return {};
  points_.erase(points_.begin());
  const auto t0 = Clock::now();
  CompileOptions o = optionsAt(step);
  o.weights = std::make_shared<const Model>(bound.session->currentWeights());
  auto next = compileStep(o, TrainingGraphKind::Step);
  if (!next) return next.error().prefixed("the recipe's step " + std::to_string(step) + " (" +
                                          schedule_.changeAt(step) + "): ");
  if (Status st = next->session->adoptState(*bound.session); !st) return st;
  ReportSchedulePoint p;
  p.step = step;
  p.change = schedule_.changeAt(step);
  p.cache = next->cache.status;
  p.nodes = static_cast<int64_t>(next->session->graph().numNodes());
  p.trainable_params = static_cast<int64_t>(next->num_params);
  bound = std::move(*next);
  p.compile_ms = msSince(t0);
  record_.schedule.push_back(std::move(p));
  return {};
}

Result<bool> RecipeRunner::afterStep(int64_t step, int64_t last, const BoundStep& bound, double train_seconds) {
  if (!evaluator_) return false;
  const int64_t done = step + 1;
  const bool due = step == last || (base_.eval_every > 0 && done % base_.eval_every == 0);
  if (!due) return false;
  auto e = evaluator_->evaluate(base_.ema > 0 ? averagedWeights(*bound.session) : bound.session->stateDict());
  if (!e) return e.error();
  e->step = done;
  e->train_seconds = train_seconds;
  eval_seconds_ += e->eval_ms / 1000;
  record_.evaluations.push_back(*e);
  if (!record_.target || record_.target->reached) return false;
  const double value = metric_ == "accuracy" ? e->accuracy.value_or(NAN)
                       : metric_ == "perplexity" ? e->perplexity.value_or(NAN)
                                                 : e->loss;
  if (!reachesTarget(metric_, value, record_.target->value)) return false;
  record_.target->reached = true;
  record_.target->step = done;
  record_.target->train_seconds = train_seconds;
  return true;
}

}  // namespace kiln::driver
