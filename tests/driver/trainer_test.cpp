// driver::runTraining, the loop every front end runs: it reads the loss only
// when someone needs it, records what the report needs, checkpoints at its
// cadence, stops when the observer says so, resumes where a session is, and
// trains to the same weights as stepping the session by hand.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "backend/training_session.h"
#include "core/data/batch_source.h"
#include "driver/report.h"
#include "driver/report_json.h"
#include "driver/trainer.h"
#include "tests/backend/random_inputs.h"

namespace kiln::driver {
namespace {

namespace fs = std::filesystem;

const char* kForward = R"(graph tiny(%input0: f32[4,3] data, %w: f32[3] param, %v: f32[3] param) {
  %0 = mul(%input0, %w) : f32[4,3]
  %1 = relu(%0) : f32[4,3]
  %2 = mul(%1, %v) : f32[4,3]
  %3 = mean(%2) : f32[]
  return %3 "output0"
}
)";

TensorMap batch() {
  Tensor x(DType::F32, {4, 3});
  for (int64_t i = 0; i < x.numel(); ++i) x.set(i, 0.25 * double(i % 5) - 0.4);
  return {{"input0", x}};
}

BoundStep tinyStep() {
  TrainingConfig c;
  c.passes.training.loss = LossKind::Model;
  c.passes.training.optimizer.kind = OptimizerKind::AdamW;
  c.lr = 0.05;
  c.num_threads = 1;
  auto s = TrainingSession::create(test::modelFromText(kForward, "tiny", 7, 1.0), c);
  EXPECT_TRUE(s.ok()) << s.error().message;
  BoundStep b;
  b.session = std::move(*s);
  b.batches = fixedBatchSource(batch(), "batch");
  b.batch_where = "batch";
  b.fixed_batch = true;
  return b;
}

/// Remembers what it was told; stops before step `stop_at`.
struct Recorder : TrainObserver {
  std::vector<int64_t> steps, read, logged;
  int64_t want = -1, stop_at = -1;
  bool wantsLoss(int64_t step) override { return step == want; }
  Status onStep(const StepRecord& r, bool loss_read, bool is_log, const std::map<std::string, double>&) override {
    steps.push_back(r.step);
    if (loss_read) read.push_back(r.step);
    if (is_log) logged.push_back(r.step);
    return {};
  }
  bool keepGoing() override { return stop_at < 0 || int64_t(steps.size()) < stop_at; }
};

bool sameBits(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

TEST(Trainer, ReadsTheLossOnlyWhenSomeoneNeedsIt) {
  BoundStep step = tinyStep();
  Recorder r;
  r.want = 4;  // a progress line due at step 4
  TrainLoopOptions o;
  o.steps = 8;
  o.log_every = 3;
  auto run = runTraining(step, o, r);
  ASSERT_TRUE(run.ok()) << run.error().message;
  EXPECT_EQ(r.steps, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(r.logged, (std::vector<int64_t>{0, 3, 6, 7}));  // every 3rd and the last
  EXPECT_EQ(r.read, (std::vector<int64_t>{0, 3, 4, 6, 7}));
  EXPECT_EQ(run->steps_run, 8);
  EXPECT_TRUE(run->records.empty());
  EXPECT_FALSE(run->stopped);
  EXPECT_EQ(run->last_loss, *step.session->readLoss());
}

TEST(Trainer, TrainsAsSteppingTheSessionByHand) {
  BoundStep a = tinyStep(), b = tinyStep();
  Recorder r;
  TrainLoopOptions o;
  o.steps = 5;
  o.record_steps = true;  // the report's: every step's loss
  auto run = runTraining(a, o, r);
  ASSERT_TRUE(run.ok()) << run.error().message;
  ASSERT_EQ(run->records.size(), 5u);
  for (int64_t i = 0; i < 5; ++i) {
    const double lr = b.session->nextLr();
    ASSERT_TRUE(b.session->step(batch()).ok());
    EXPECT_EQ(run->records[size_t(i)].loss, *b.session->readLoss()) << i;
    EXPECT_EQ(run->records[size_t(i)].lr, lr) << i;
    EXPECT_EQ(run->records[size_t(i)].step, i);
  }
  for (const auto& [name, t] : b.session->stateDict())
    EXPECT_TRUE(sameBits(a.session->stateDict().at(name), t)) << name;
}

TEST(Trainer, StopsWhenTheObserverSaysSoAndResumesWhereTheSessionIs) {
  BoundStep step = tinyStep();
  Recorder r;
  r.stop_at = 2;
  TrainLoopOptions o;
  o.steps = 6;
  auto run = runTraining(step, o, r);
  ASSERT_TRUE(run.ok());
  EXPECT_TRUE(run->stopped);
  EXPECT_EQ(run->steps_run, 2);
  EXPECT_EQ(step.session->stepsDone(), 2);
  Recorder rest;
  auto again = runTraining(step, o, rest);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->first_step, 2);
  EXPECT_EQ(rest.steps, (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(rest.logged.front(), 2);
}

TEST(Trainer, CheckpointsAtItsCadenceButNotAfterTheLastStep) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_trainer_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  BoundStep step = tinyStep();
  Recorder r;
  TrainLoopOptions o;
  o.steps = 4;
  o.checkpoint_dir = dir.string();
  o.checkpoint_every = 3;
  ASSERT_TRUE(runTraining(step, o, r).ok());
  BoundStep resumed = tinyStep();
  ASSERT_TRUE(resumed.session->loadCheckpoint(dir.string()).ok());
  EXPECT_EQ(resumed.session->stepsDone(), 3);  // saved after step 3 of 4, not after the last
  fs::remove_all(dir);
}

TEST(Trainer, AnObserversErrorStopsTheRunWithIt) {
  struct Failing : TrainObserver {
    Status onStep(const StepRecord& r, bool, bool, const std::map<std::string, double>&) override {
      if (r.step == 1) return Error{"the log disk is full"};
      return {};
    }
  } failing;
  BoundStep step = tinyStep();
  TrainLoopOptions o;
  o.steps = 5;
  auto run = runTraining(step, o, failing);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.error().message, "the log disk is full");
  EXPECT_EQ(step.session->stepsDone(), 2);
}

TEST(Trainer, TheReportOfATrainedStepReadsBackAsItWasWritten) {
  BoundStep step = tinyStep();
  Recorder r;
  TrainLoopOptions o;
  o.steps = 3;
  o.record_steps = true;
  o.profile_nodes = true;
  auto run = runTraining(step, o, r);
  ASSERT_TRUE(run.ok());
  CompileOptions options;
  options.model.path = "tiny.fx.json";
  Report report = buildReport("train", options, step, 1.0);
  addTrainingResult(report, step, *run);
  ASSERT_TRUE(report.steps.has_value());
  EXPECT_EQ(report.steps->size(), 3u);
  EXPECT_TRUE(report.kernels.at(0).measured_ms.has_value());
  EXPECT_EQ(report.execution.profiled_steps, 2);  // the first step is not profiled
  // What the writer writes, through a file's text, reads back to the same
  // report: every field the writer fills is one the reader reads.
  const nlohmann::ordered_json written = toJson(report);
  auto back = reportFromJson(nlohmann::json::parse(written.dump()));
  ASSERT_TRUE(back.ok()) << back.error().message;
  // (equal as JSON values: a reader's object keys come back sorted)
  EXPECT_EQ(nlohmann::json(toJson(*back)), nlohmann::json(written));
  EXPECT_EQ(back->memory.tensors.size(), report.memory.tensors.size());
  EXPECT_EQ(back->kernels.at(0).measured_ms, report.kernels.at(0).measured_ms);
  // A key missing or retyped: an error naming it and the version.
  const nlohmann::json j = written;
  nlohmann::json renamed = j;
  renamed["steps"][1].erase("loss");
  auto bad = reportFromJson(renamed);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "report version 1: steps[1].loss: missing");
  nlohmann::json retyped = j;
  retyped["memory"]["tensors"][0]["bytes"] = -4;
  bad = reportFromJson(retyped);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message,
            "report version 1: memory.tensors[0].bytes: expected a non-negative integer, got an integer");
  nlohmann::json newer = j;
  newer["version"] = 2;
  bad = reportFromJson(newer);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "report version 2: this Kiln reads version 1");
  EXPECT_FALSE(reportFromJson(nlohmann::json::array()).ok());
  // A key this Kiln does not know is not an error (adding one is no version change).
  nlohmann::json extra = j;
  extra["memory"]["by_category"] = {{"weights", 1}};
  EXPECT_TRUE(reportFromJson(extra).ok());
  const std::string path = ::testing::TempDir() + "kiln_trainer_report.json";
  std::remove(path.c_str());
  ASSERT_TRUE(writeReport(path, report).ok());
  EXPECT_TRUE(std::ifstream(path).good());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kiln::driver
