// The selective_backprop pass (passes/selective_backprop.h) in the whole
// training pipeline: the step takes the whole batch (6 rows), scores it with
// the forward at 6 rows, and everything it trains with -- the training
// forward, the loss, the backward and the update -- sees the 3 selected rows
// only. Batch 6 is a size no other dim of the model has, so any node with a
// 6-row output outside the scoring part would show.
#include <gtest/gtest.h>

#include "core/text_ir.h"
#include "passes/training_graph.h"

namespace kiln {
namespace {

std::string forward(int rows) {
  const std::string n = std::to_string(rows);
  return "graph mlp(%input0: f32[" + n + R"(,5] data, %fc1.weight: f32[7,5] param, %fc1.bias: f32[7] param, %fc2.weight: f32[4,7] param) {
  %0 = linear(%input0, %fc1.weight, %fc1.bias) : f32[)" + n + R"(,7] @fc1
  %1 = relu(%0) : f32[)" + n + R"(,7] @act
  %2 = linear(%1, %fc2.weight) : f32[)" + n + R"(,4] @fc2
  return %2 "output0"
}
)";
}

Result<Graph> step(double fraction, LossKind loss = LossKind::CrossEntropy) {
  auto trained = parseGraph(forward(3), "mlp");
  auto scoring = parseGraph(forward(6), "mlp");
  EXPECT_TRUE(trained.ok() && scoring.ok());
  PassContext ctx;
  ctx.training.loss = loss;
  ctx.training.target =
      loss == LossKind::CrossEntropy ? TensorType{DType::I64, {3}} : TensorType{DType::F32, {3, 4}};
  ctx.training.selective = {fraction, std::make_shared<const Graph>(std::move(*scoring))};
  return buildTrainingGraph(*trained, ctx, TrainingGraphKind::Step);
}

TEST(SelectiveBackprop, BackwardSeesTheSelectedRowsOnly) {
  auto g = step(0.5);
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->findInput("input0")->type(), (TensorType{DType::F32, {6, 5}}));
  EXPECT_EQ(g->findInput("target")->type(), (TensorType{DType::I64, {6}}));
  int topk = 0, scoring = 0, trained_linears = 0;
  for (const auto& n : g->nodes()) {
    const bool in_scoring = n->scope().rfind("scoring", 0) == 0 || n->scope() == "selective_backprop";
    scoring += n->scope().rfind("scoring", 0) == 0;
    if (n->is(Op::topk)) {
      ++topk;
      EXPECT_EQ(n->i("k"), 3);
    }
    if (in_scoring) continue;
    for (const Value* v : n->outputs())
      EXPECT_TRUE(v->shape().empty() || v->shape()[0] != 6)
          << n->op() << " @" << n->scope() << " outside the scoring has a whole-batch output " << v->type().str();
    for (const Value* v : n->inputs())
      EXPECT_TRUE(v->isGraphInput() || v->shape().empty() || v->shape()[0] != 6 || n->is(Op::index))
          << n->op() << " @" << n->scope() << " reads a whole-batch value";
    trained_linears += n->is(Op::linear) || n->is(Op::gemm) || n->is(Op::matmul);
  }
  EXPECT_EQ(topk, 1);
  EXPECT_GE(scoring, 2);          // the scoring forward's two linears (fuse puts the relu into the first)
  EXPECT_GE(trained_linears, 4);  // the training forward and its backward
  // Every gradient flows to the parameters through the selected rows: the
  // update is there, and nothing differentiates the scoring forward.
  bool updated = false;
  for (const GraphOutput& o : g->outputs()) updated |= o.role == OutputRole::ParamUpdate && o.name == "fc1.weight";
  EXPECT_TRUE(updated);
}

TEST(SelectiveBackprop, MseScoresTheMeanSquaredErrorPerExample) {
  auto g = step(0.5, LossKind::Mse);
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->findInput("target")->type(), (TensorType{DType::F32, {6, 4}}));
}

TEST(SelectiveBackprop, OtherLossesAreRefused) {
  auto g = step(0.5, LossKind::L1);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().message.find("selective_backprop: scores examples with cross_entropy or mse losses, not l1"),
            std::string::npos)
      << g.error().message;
}

}  // namespace
}  // namespace kiln
