// TrainingSession: steps, state carried between steps, checkpoints and exact
// resume. (Agreement with torch.optim is checked end to end against PyTorch
// in tests/train/.)
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "backend/checkpoint.h"
#include "backend/training_session.h"
#include "core/text_ir.h"
#include "tests/backend/random_inputs.h"

namespace kiln {
namespace {
namespace fs = std::filesystem;

const char* kForward = R"(graph tiny(%input0: f32[4,3] data, %w: f32[3] param, %b: f32[3] param, %v: f32[3] param) {
  %0 = mul(%input0, %w) : f32[4,3]
  %1 = add(%0, %b) : f32[4,3]
  %2 = relu(%1) : f32[4,3]
  %3 = mul(%2, %v) : f32[4,3]
  %4 = mean(%3) : f32[]
  return %4 "output0"
}
)";

Model tinyModel() {
  Model m = test::modelFromText(kForward, "tiny", 7, 1.0);
  m.aliases["tied.w"] = "w";
  return m;
}

TensorMap batchFor(int64_t step) {
  std::mt19937_64 rng(100 + static_cast<uint64_t>(step));
  std::normal_distribution<double> d(0, 1);
  Tensor x(DType::F32, {4, 3});
  for (int64_t i = 0; i < x.numel(); ++i) x.set(i, d(rng));
  return {{"input0", x}};
}

TrainingConfig adamwConfig() {
  TrainingConfig c;
  c.passes.training.loss = LossKind::Model;
  c.passes.training.optimizer.kind = OptimizerKind::AdamW;
  c.passes.training.optimizer.clip_grad_norm = 0.5;
  c.lr = 0.05;
  c.schedule.kind = LrSchedule::Kind::WarmupCosine;
  c.schedule.warmup_steps = 2;
  c.schedule.total_steps = 6;
  c.num_threads = 1;
  return c;
}

bool sameBits(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("kiln_ckpt_" + std::to_string(::getpid()) + "_" +
                                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  TempDir() { fs::remove_all(path); }
  ~TempDir() { fs::remove_all(path); }
};

std::vector<double> run(TrainingSession& s, int64_t until) {
  std::vector<double> losses;
  while (s.stepsDone() < until) {
    EXPECT_TRUE(s.step(batchFor(s.stepsDone())).ok());
    losses.push_back(*s.readLoss());
  }
  return losses;
}

TEST(TrainingSession, StepsChangeParametersAndKeepTheCallersModel) {
  Model m = tinyModel();
  Tensor w0 = m.weights["w"].clone();
  auto s = TrainingSession::create(m, adamwConfig());
  ASSERT_TRUE(s.ok()) << s.error().message;
  auto losses = run(**s, 3);
  EXPECT_NE(losses[0], losses[2]);
  EXPECT_TRUE(sameBits(m.weights["w"], w0)) << "the session must not write into the caller's weights";
  TensorMap sd = (*s)->stateDict();
  EXPECT_FALSE(sameBits(sd.at("w"), w0));
  ASSERT_TRUE(sd.count("tied.w"));
  EXPECT_TRUE(sameBits(sd.at("tied.w"), sd.at("w")));
  TensorMap opt = (*s)->optimizerState();
  EXPECT_EQ(opt.at("step").at(0), 3.0);
  EXPECT_TRUE(opt.count("exp_avg.w") && opt.count("exp_avg_sq.v"));
  EXPECT_TRUE((*s)->readMetrics().count("grad_norm"));
}

// Optimizer state is made at the first step (compiling must not fill the
// moments of a big model); before it, the session reports zeros of the
// graph's types, as a fresh torch.optim optimizer would start from.
TEST(TrainingSession, OptimizerStateIsZerosBeforeTheFirstStep) {
  Model m = tinyModel();
  auto s = TrainingSession::create(m, adamwConfig());
  ASSERT_TRUE(s.ok()) << s.error().message;
  TensorMap opt = (*s)->optimizerState();
  size_t opt_inputs = 0;
  for (const Value* v : (*s)->graph().inputs()) {
    if (v->role() != ValueRole::OptState) continue;
    ++opt_inputs;
    ASSERT_TRUE(opt.count(v->name())) << v->name();
    EXPECT_EQ(opt.at(v->name()).type(), v->type()) << v->name();
    for (int64_t i = 0; i < opt.at(v->name()).numel(); ++i) EXPECT_EQ(opt.at(v->name()).at(i), 0.0) << v->name();
  }
  EXPECT_EQ(opt.size(), opt_inputs);
  EXPECT_GE(opt_inputs, 7u);  // step + exp_avg and exp_avg_sq of w, b, v
}

// Parameters and moments the session alone holds are updated in place; a
// state_dict the caller keeps is not (it stays the values it had).
TEST(TrainingSession, UpdatesInPlaceOnlyWhatTheSessionAloneHolds) {
  Model m = tinyModel();
  auto s = TrainingSession::create(m, adamwConfig());
  ASSERT_TRUE(s.ok()) << s.error().message;
  TrainingSession& t = **s;
  run(t, 1);  // the first step reads the caller's weights: new buffers
  EXPECT_NE(t.stateDict().at("w").raw(), m.weights.at("w").raw());
  const void* w = t.stateDict().at("w").raw();
  const void* mw = t.optimizerState().at("exp_avg.w").raw();
  run(t, 2);
  EXPECT_EQ(t.stateDict().at("w").raw(), w) << "w was not updated in place";
  EXPECT_EQ(t.optimizerState().at("exp_avg.w").raw(), mw) << "exp_avg.w was not updated in place";
  TensorMap kept = t.stateDict();
  const Tensor before = kept.at("w").clone();
  run(t, 3);
  EXPECT_TRUE(sameBits(kept.at("w"), before)) << "a state_dict the caller holds changed under it";
  EXPECT_NE(t.stateDict().at("w").raw(), kept.at("w").raw());
  EXPECT_FALSE(sameBits(t.stateDict().at("w"), before));
}

TEST(TrainingSession, ResumeReproducesTheUninterruptedRunExactly) {
  TempDir dir;
  Model m = tinyModel();
  auto full = TrainingSession::create(m, adamwConfig());
  ASSERT_TRUE(full.ok()) << full.error().message;
  std::vector<double> want = run(**full, 6);

  auto first = TrainingSession::create(m, adamwConfig());
  ASSERT_TRUE(first.ok());
  std::vector<double> got = run(**first, 3);
  ASSERT_TRUE((*first)->saveCheckpoint(dir.path.string()).ok());

  auto resumed = TrainingSession::create(m, adamwConfig());
  ASSERT_TRUE(resumed.ok());
  Status st = (*resumed)->loadCheckpoint(dir.path.string());
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ((*resumed)->stepsDone(), 3);
  for (double l : run(**resumed, 6)) got.push_back(l);
  EXPECT_EQ(got, want);  // bit-identical losses
  TensorMap a = (*full)->stateDict(), b = (*resumed)->stateDict();
  for (const auto& [k, t] : a) EXPECT_TRUE(sameBits(t, b.at(k))) << k;
  TensorMap oa = (*full)->optimizerState(), ob = (*resumed)->optimizerState();
  for (const auto& [k, t] : oa) EXPECT_TRUE(sameBits(t, ob.at(k))) << k;
}

TEST(TrainingSession, CheckpointDirectoryKeepsOnlyTheLatestCompleteStep) {
  TempDir dir;
  auto s = TrainingSession::create(tinyModel(), adamwConfig());
  ASSERT_TRUE(s.ok());
  run(**s, 1);
  ASSERT_TRUE((*s)->saveCheckpoint(dir.path.string()).ok());
  // A half-written directory from a crashed save must not confuse the next.
  fs::create_directories(dir.path / "step-00000002.tmp-999");
  run(**s, 2);
  ASSERT_TRUE((*s)->saveCheckpoint(dir.path.string()).ok());
  std::ifstream latest(dir.path / "latest");
  std::string name;
  latest >> name;
  EXPECT_EQ(name, "step-00000002");
  EXPECT_TRUE(fs::exists(dir.path / name / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir.path / "step-00000001"));
}

/// The checkpoint of `steps` steps: one parameter holding `steps`.
Checkpoint checkpointAt(int64_t steps) {
  Tensor w(DType::F32, {1});
  w.set(0, static_cast<double>(steps));
  return {{{"w", w}}, {}, {{"steps_done", steps}}};
}

std::string latestOf(const fs::path& dir) {
  std::ifstream latest(dir / "latest");
  std::string name;
  latest >> name;
  return name;
}

TEST(Checkpoints, KeepTheNewestKAndNeverAnotherWritersTemporaries) {
  TempDir dir;
  const std::string d = dir.path.string();
  ASSERT_TRUE(writeCheckpoint(d, checkpointAt(1)).ok());
  // Another writer's save in progress, and entries that are no checkpoint.
  for (const char* other : {"step-00000009.tmp-4242", "step-notes", "step-0000001", "step-00000001-r0"})
    fs::create_directories(dir.path / other);
  for (int64_t step = 2; step <= 4; ++step) ASSERT_TRUE(writeCheckpoint(d, checkpointAt(step), 2).ok());
  EXPECT_EQ(latestOf(dir.path), "step-00000004");
  EXPECT_TRUE(fs::exists(dir.path / "step-00000004" / "model.safetensors"));
  EXPECT_TRUE(fs::exists(dir.path / "step-00000003" / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir.path / "step-00000002"));
  EXPECT_FALSE(fs::exists(dir.path / "step-00000001"));
  for (const char* other : {"step-00000009.tmp-4242", "step-notes", "step-0000001", "step-00000001-r0"})
    EXPECT_TRUE(fs::exists(dir.path / other)) << other << " is not this writer's to remove";
  auto back = readCheckpoint(d);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->model.at("w").at(0), 4.0);
}

TEST(Checkpoints, TheSameStepSavedAgainGetsANewNameBeforeTheOldOneGoes) {
  TempDir dir;
  const std::string d = dir.path.string();
  ASSERT_TRUE(writeCheckpoint(d, checkpointAt(3), 2).ok());
  Checkpoint again = checkpointAt(3);
  again.model.at("w").set(0, 33.0);
  ASSERT_TRUE(writeCheckpoint(d, again, 2).ok());
  // Both complete; `latest` names the new one, which a resume reads.
  EXPECT_EQ(latestOf(dir.path), "step-00000003-r1");
  EXPECT_TRUE(fs::exists(dir.path / "step-00000003" / "model.safetensors"));
  auto back = readCheckpoint(d);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->model.at("w").at(0), 33.0);
  // Keeping one: the revision stays, the first save goes.
  ASSERT_TRUE(writeCheckpoint(d, again, 1).ok());
  EXPECT_EQ(latestOf(dir.path), "step-00000003-r2");
  EXPECT_FALSE(fs::exists(dir.path / "step-00000003"));
  EXPECT_FALSE(fs::exists(dir.path / "step-00000003-r1"));
  EXPECT_FALSE(writeCheckpoint(d, again, 0).ok());
}

TEST(Checkpoints, AFailedSaveLeavesTheLatestCheckpointAsItWas) {
  TempDir dir;
  const std::string d = dir.path.string();
  ASSERT_TRUE(writeCheckpoint(d, checkpointAt(1)).ok());
  // A save that cannot write its files (trainer state without steps_done,
  // then a directory path that is a file) fails and changes nothing.
  EXPECT_FALSE(writeCheckpoint(d, Checkpoint{{}, {}, nlohmann::json::object()}).ok());
  std::ofstream(dir.path / "blocked") << "a file";
  EXPECT_FALSE(writeCheckpoint((dir.path / "blocked").string(), checkpointAt(2)).ok());
  EXPECT_EQ(latestOf(dir.path), "step-00000001");
  auto back = readCheckpoint(d);
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->model.at("w").at(0), 1.0);
}

TEST(TrainingSession, ResumeErrorsAreSpecific) {
  TempDir dir;
  auto s = TrainingSession::create(tinyModel(), adamwConfig());
  ASSERT_TRUE(s.ok());
  Status st = (*s)->loadCheckpoint(dir.path.string());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("not a Kiln checkpoint directory"), std::string::npos) << st.error().message;

  run(**s, 1);
  ASSERT_TRUE((*s)->saveCheckpoint(dir.path.string()).ok());
  TrainingConfig sgd = adamwConfig();
  sgd.passes.training.optimizer.kind = OptimizerKind::Sgd;
  auto other = TrainingSession::create(tinyModel(), sgd);
  ASSERT_TRUE(other.ok());
  st = (*other)->loadCheckpoint(dir.path.string());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("saved with optimizer adamw, this run uses sgd"), std::string::npos)
      << st.error().message;

  std::ofstream(dir.path / "latest") << "../../etc\n";
  st = (*s)->loadCheckpoint(dir.path.string());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("does not name a checkpoint"), std::string::npos) << st.error().message;
}

TEST(TrainingSession, BatchChecksNameTheProblem) {
  auto s = TrainingSession::create(tinyModel(), adamwConfig());
  ASSERT_TRUE(s.ok());
  Status st = (*s)->checkBatch({}, "b.safetensors");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message, "b.safetensors: no tensor 'input0' (model input f32[4,3])");
  st = (*s)->checkBatch({{"input0", Tensor(DType::F32, {2, 3})}}, "b.safetensors");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message, "b.safetensors: 'input0' is f32[2,3], the model needs f32[4,3]");
}

TEST(LrSchedule, WarmupThenCosineToMinimum) {
  LrSchedule s{LrSchedule::Kind::WarmupCosine, 4, 14, 0.1};
  EXPECT_DOUBLE_EQ(s.at(1.0, 0), 0.25);
  EXPECT_DOUBLE_EQ(s.at(1.0, 3), 1.0);
  EXPECT_DOUBLE_EQ(s.at(1.0, 4), 1.0);     // cosine starts at the base rate
  EXPECT_NEAR(s.at(1.0, 9), 0.55, 1e-12);  // half way: (1 + 0.1) / 2
  EXPECT_DOUBLE_EQ(s.at(1.0, 14), 0.1);
  EXPECT_DOUBLE_EQ(s.at(1.0, 100), 0.1);
  EXPECT_DOUBLE_EQ(LrSchedule{}.at(0.3, 7), 0.3);
}

TEST(LrSchedule, WarmupThenConstant) {
  LrSchedule s{LrSchedule::Kind::Constant, 4, 14, 0.1};
  EXPECT_DOUBLE_EQ(s.at(1.0, 0), 0.25);
  EXPECT_DOUBLE_EQ(s.at(1.0, 2), 0.75);
  EXPECT_DOUBLE_EQ(s.at(1.0, 3), 1.0);
  EXPECT_DOUBLE_EQ(s.at(1.0, 14), 1.0);  // no decay: total and min_lr are the cosine's
}

}  // namespace
}  // namespace kiln
