// The amp pass and fp16 dynamic loss scaling (passes/amp.h): the policy's
// casts, and GradScaler's semantics run as graph ops inside the step -- an
// inf gradient skips the update bit for bit and halves the scale; growth
// after growth_interval good steps. (Golden IR: tests/passes/filecheck/
// amp*.kir; parity with torch.autocast: tests/train/amp_parity.py.)
#include <gtest/gtest.h>

#include <cstring>

#include "backend/training_session.h"
#include "core/text_ir.h"
#include "core/verifier.h"
#include "passes/amp.h"

namespace kiln {
namespace {

// A linear layer and a mean: loss = mean(x W^T + b). Its backward is an
// f16 matmul once amp lowers the linear.
const char* kForward = R"(graph lin(%input0: f32[4,3] data, %w: f32[2,3] param, %b: f32[2] param) {
  %0 = linear(%input0, %w, %b) : f32[4,2]
  %1 = softmax(%0) {dim=1} : f32[4,2]
  %2 = mul(%0, %1) : f32[4,2]
  %3 = mean(%2) : f32[]
  return %3 "output0"
}
)";

Model linModel() {
  Model m;
  auto g = parseGraph(kForward, "lin");
  EXPECT_TRUE(g.ok()) << g.error().message;
  m.graph = std::move(*g);
  Tensor w(DType::F32, {2, 3}), b(DType::F32, {2});
  for (int64_t i = 0; i < w.numel(); ++i) w.set(i, 0.1 * static_cast<double>(i + 1) - 0.25);
  for (int64_t i = 0; i < b.numel(); ++i) b.set(i, 0.05 * static_cast<double>(i));
  m.weights = {{"w", w}, {"b", b}};
  m.source = "lin";
  return m;
}

/// x filled with `v` (alternating sign): 1 trains normally; 1e4 makes the
/// f16 backward overflow once the loss is scaled by 65536.
TensorMap batch(double v) {
  Tensor x(DType::F32, {4, 3});
  for (int64_t i = 0; i < x.numel(); ++i) x.set(i, (i % 2 ? -v : v) * (1 + 0.1 * static_cast<double>(i)));
  return {{"input0", x}};
}

TrainingConfig fp16Config(int64_t growth_interval = 2000) {
  TrainingConfig c;
  c.passes.training.loss = LossKind::Model;
  c.passes.training.optimizer.kind = OptimizerKind::AdamW;
  c.passes.training.amp.mode = AmpMode::Fp16;
  c.passes.training.amp.growth_interval = growth_interval;
  c.lr = 0.01;
  c.num_threads = 1;
  return c;
}

bool sameBits(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

double state(const TrainingSession& s, const char* name) {
  return s.optimizerState().at(name).at(0);
}

TEST(Amp, LowersMatmulKeepsSoftmaxF32AndTheInterface) {
  Model m = linModel();
  PassContext ctx;
  ctx.training.amp.mode = AmpMode::Bf16;
  auto r = runAmp(m.graph, ctx);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(verify(m.graph).ok());
  std::map<std::string, DType> out_of;
  for (const auto& n : m.graph.nodes()) out_of[n->op()] = n->output()->dtype();
  EXPECT_EQ(out_of["linear"], DType::BF16);
  EXPECT_EQ(out_of["softmax"], DType::F32);
  EXPECT_EQ(out_of["mul"], DType::F32);  // bf16 * f32 promotes
  EXPECT_EQ(out_of["mean"], DType::F32);
  EXPECT_EQ(r->statistics.at("ops_lowered"), 1);
  EXPECT_EQ(m.graph.findInput("w")->dtype(), DType::F32);  // master weights
  EXPECT_EQ(m.graph.outputs()[0].value->dtype(), DType::F32);
}

TEST(Amp, NoneChangesNothing) {
  Model m = linModel();
  std::string before = printGraph(m.graph);
  PassContext ctx;
  auto r = runAmp(m.graph, ctx);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->changed);
  EXPECT_EQ(printGraph(m.graph), before);
}

TEST(Amp, Fp16LossScalingNeedsTheLoss) {
  Model m = linModel();
  PassContext ctx;
  ctx.training.amp.mode = AmpMode::Fp16;
  auto r = runAmp(m.graph, ctx);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("run amp after the loss pass"), std::string::npos) << r.error().message;
}

TEST(AmpScaler, InfGradientSkipsTheStepAndHalvesTheScale) {
  auto s = TrainingSession::create(linModel(), fp16Config());
  ASSERT_TRUE(s.ok()) << s.error().message;
  TrainingSession& t = **s;
  bool skip_attr = false;
  for (const auto& n : t.graph().nodes())
    if (n->op() == "adam_update") skip_attr = n->i("skip_nonfinite") == 1;
  EXPECT_TRUE(skip_attr) << "the update must be a select inside the kernel";

  // A good step: the update happens at the initial scale 65536.
  ASSERT_TRUE(t.step(batch(1.0)).ok());
  EXPECT_EQ(t.readMetrics().at(kLossScaleMetric), 65536.0);
  EXPECT_EQ(state(t, "step"), 1.0);
  EXPECT_EQ(state(t, kLossScaleInput), 65536.0);
  EXPECT_EQ(state(t, kGrowthTrackerInput), 1.0);
  TensorMap params = t.stateDict(), opt = t.optimizerState();
  EXPECT_FALSE(sameBits(params.at("w"), linModel().weights.at("w")));

  // Overflow in the f16 backward: nothing changes but the scaler.
  ASSERT_TRUE(t.step(batch(1e4)).ok());
  EXPECT_EQ(t.readMetrics().at(kLossScaleMetric), 65536.0);
  for (const auto& [k, v] : t.stateDict()) EXPECT_TRUE(sameBits(v, params.at(k))) << k << " changed";
  for (const auto& [k, v] : t.optimizerState())
    if (k != kLossScaleInput && k != kGrowthTrackerInput) EXPECT_TRUE(sameBits(v, opt.at(k))) << k << " changed";
  EXPECT_EQ(state(t, "step"), 1.0);  // the skipped step does not count
  EXPECT_EQ(state(t, kLossScaleInput), 32768.0);
  EXPECT_EQ(state(t, kGrowthTrackerInput), 0.0);

  // Training goes on at the lower scale.
  ASSERT_TRUE(t.step(batch(1.0)).ok());
  EXPECT_EQ(t.readMetrics().at(kLossScaleMetric), 32768.0);
  EXPECT_EQ(state(t, "step"), 2.0);
  EXPECT_FALSE(sameBits(t.stateDict().at("w"), params.at("w")));
}

TEST(AmpScaler, GrowsAfterGrowthIntervalGoodSteps) {
  auto s = TrainingSession::create(linModel(), fp16Config(/*growth_interval=*/3));
  ASSERT_TRUE(s.ok()) << s.error().message;
  TrainingSession& t = **s;
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(t.step(batch(1.0)).ok());
  EXPECT_EQ(state(t, kLossScaleInput), 65536.0);
  EXPECT_EQ(state(t, kGrowthTrackerInput), 2.0);
  ASSERT_TRUE(t.step(batch(1.0)).ok());  // the third good step in a row
  EXPECT_EQ(state(t, kLossScaleInput), 131072.0);
  EXPECT_EQ(state(t, kGrowthTrackerInput), 0.0);
  ASSERT_TRUE(t.step(batch(1.0)).ok());
  EXPECT_EQ(t.readMetrics().at(kLossScaleMetric), 131072.0);
  EXPECT_EQ(state(t, "step"), 4.0);
}

}  // namespace
}  // namespace kiln
