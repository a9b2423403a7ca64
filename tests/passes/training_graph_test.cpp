// Golden text-IR tests of the training passes (loss -> autodiff -> optimizer
// -> dce). Regenerate after an intended change with
//   KILN_UPDATE_GOLDEN=1 build/tests/kiln_unit_tests --gtest_filter='TrainingGraph*'
// and review the diff.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/text_ir.h"
#include "passes/training_graph.h"

namespace kiln {
namespace {

const char* kForward = R"(graph tiny(%input0: f32[2,3] data, %w: f32[3] param, %b: f32[3] param, %v: f32[3] param) {
  %0 = mul(%input0, %w) : f32[2,3] @layer
  %1 = add(%0, %b) : f32[2,3] @layer
  %2 = relu(%1) : f32[2,3] @act
  %3 = mul(%2, %v) : f32[2,3] @head
  %4 = mean(%3) : f32[] @head
  %5 = sum(%2) : f32[] @unused
  return %4 "output0", %5 "output1"
}
)";

void expectGolden(const std::string& name, const std::string& text) {
  std::string path = std::string(KILN_TESTS_DIR) + "/passes/golden/" + name;
  if (std::getenv("KILN_UPDATE_GOLDEN")) {
    std::ofstream(path) << text;
    GTEST_SKIP() << "updated " << path;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "missing golden file " << path << " (run with KILN_UPDATE_GOLDEN=1)";
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(text, want.str()) << "golden " << path << " differs";
}

Graph build(TrainingGraphKind kind, const TrainingOptions& opts) {
  auto fwd = parseGraph(kForward, "tiny");
  EXPECT_TRUE(fwd.ok()) << fwd.error().message;
  PassContext ctx;
  ctx.training = opts;
  auto g = buildTrainingGraph(*fwd, ctx, kind);
  EXPECT_TRUE(g.ok()) << g.error().message;
  return g.ok() ? std::move(*g) : Graph();
}

TEST(TrainingGraph, GradientsOfModelLoss) {
  TrainingOptions o;
  o.loss = LossKind::Model;
  expectGolden("model_loss_gradients.txt", printGraph(build(TrainingGraphKind::Gradients, o)));
}

TEST(TrainingGraph, SgdNesterovWithClippingStep) {
  TrainingOptions o;
  o.loss = LossKind::Model;
  o.optimizer.kind = OptimizerKind::Sgd;
  o.optimizer.momentum = 0.9;
  o.optimizer.nesterov = true;
  o.optimizer.weight_decay = 1e-4;
  o.optimizer.clip_grad_norm = 1.0;
  o.frozen = {"b"};
  expectGolden("sgd_nesterov_clip_step.txt", printGraph(build(TrainingGraphKind::Step, o)));
}

TEST(TrainingGraph, AdamWStep) {
  TrainingOptions o;
  o.loss = LossKind::Model;
  o.optimizer.kind = OptimizerKind::AdamW;
  expectGolden("adamw_step.txt", printGraph(build(TrainingGraphKind::Step, o)));
}

TEST(TrainingGraph, ErrorsNameThePass) {
  auto fwd = parseGraph(kForward, "tiny");
  ASSERT_TRUE(fwd.ok());
  PassContext ctx;
  ctx.training.loss = LossKind::Mse;
  ctx.training.target = TensorType{DType::F32, {2, 2}};
  auto g = buildTrainingGraph(*fwd, ctx, TrainingGraphKind::Step);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().message.find("mse needs a target of the model output's type f32[]"), std::string::npos)
      << g.error().message;
  ctx.training.loss = LossKind::Model;
  ctx.training.frozen = {"w", "b", "v"};
  g = buildTrainingGraph(*fwd, ctx, TrainingGraphKind::Step);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().message.find("nothing to train"), std::string::npos) << g.error().message;
}

}  // namespace
}  // namespace kiln
