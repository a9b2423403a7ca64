// Finite-difference checks of the normalization gradient rules (double
// precision): batch_norm (training and eval), layer_norm, group_norm,
// softmax and log_softmax, plus the structural guarantee that batch_norm's
// running statistics neither receive nor pass on gradients.
#include "passes/autodiff.h"
#include "tests/passes/grad_check.h"

namespace kiln::testing {
namespace {

/// batch_norm inputs for x of shape `x`: weight, bias, running_mean, running_var.
std::vector<TensorType> batchNormInputs(const Shape& x) {
  const int64_t c = x[1];
  return {f64(x), f64({c}), f64({c}), f64({c}), f64({c})};
}

TEST(GradNorm, BatchNormTraining) {
  // Only y feeds the loss: the running-stat outputs carry no gradient in PyTorch.
  for (const Shape& x : {Shape{5, 3}, Shape{2, 3, 3}, Shape{3, 2, 2, 2}})
    EXPECT_TRUE(checkGrad({.op = "batch_norm",
                           .attrs = {{"training", int64_t{1}}},
                           .inputs = batchNormInputs(x),
                           .no_grad = {3, 4},
                           .loss_outputs = {0},
                           .ranges = {{4, {0.5, 2}}}}));
  EXPECT_TRUE(checkGrad({.op = "batch_norm",
                         .attrs = {{"training", int64_t{1}}, {"eps", 0.5}, {"momentum", 0.3}},
                         .inputs = batchNormInputs({4, 2, 3}),
                         .no_grad = {3, 4},
                         .loss_outputs = {0},
                         .ranges = {{4, {0.5, 2}}}}));
}

TEST(GradNorm, BatchNormEval) {
  for (const Shape& x : {Shape{4, 3}, Shape{2, 3, 2, 2}})
    EXPECT_TRUE(checkGrad({.op = "batch_norm",
                           .attrs = {{"training", int64_t{0}}},
                           .inputs = batchNormInputs(x),
                           .no_grad = {3, 4},
                           .ranges = {{4, {0.5, 2}}}}));
  EXPECT_TRUE(checkGrad({.op = "batch_norm",
                         .attrs = {{"eps", 0.25}},
                         .inputs = batchNormInputs({3, 2, 4}),
                         .no_grad = {3, 4},
                         .ranges = {{4, {0.1, 1}}}}));
}

TEST(GradNorm, BatchNormWeightOnly) {
  // x is data (no gradient wanted): weight and bias still get theirs.
  EXPECT_TRUE(checkGrad({.op = "batch_norm",
                         .attrs = {{"training", int64_t{1}}},
                         .inputs = batchNormInputs({4, 3, 2}),
                         .no_grad = {0, 3, 4},
                         .loss_outputs = {0},
                         .ranges = {{4, {0.5, 2}}}}));
}

TEST(GradNorm, BatchNormRunningStatsGetNoGradient) {
  // The loss reads only the updated running mean: nothing flows back to x,
  // and the running-stat inputs never get a gradient either.
  Graph g;
  Value* x = g.addInput("x", f64({4, 3}), ValueRole::Param);
  Value* w = g.addInput("w", f64({3}), ValueRole::Param);
  Value* b = g.addInput("b", f64({3}), ValueRole::Param);
  Value* rm = g.addInput("rm", f64({3}), ValueRole::Param);
  Value* rv = g.addInput("rv", f64({3}), ValueRole::Param);
  Node* bn = g.create("batch_norm", {x, w, b, rm, rv}, {{"training", int64_t{1}}});
  Value* loss = g.add("add", {g.add("sum", {bn->output(0)}), g.add("sum", {bn->output(1)})});
  auto grads = differentiate(g, loss, {x, w, b, rm, rv});
  ASSERT_TRUE(grads) << grads.error().message;
  EXPECT_NE((*grads)[0], nullptr);
  EXPECT_EQ((*grads)[3], nullptr);
  EXPECT_EQ((*grads)[4], nullptr);

  Graph h;
  Value* hx = h.addInput("x", f64({4, 3}), ValueRole::Param);
  std::vector<Value*> ins{hx};
  for (const char* name : {"w", "b", "rm", "rv"}) ins.push_back(h.addInput(name, f64({3}), ValueRole::Buffer));
  Node* hbn = h.create("batch_norm", ins, {{"training", int64_t{1}}});
  auto none = differentiate(h, h.add("sum", {hbn->output(2)}), {hx});
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_EQ((*none)[0], nullptr);
}

TEST(GradNorm, LayerNorm) {
  EXPECT_TRUE(checkGrad({.op = "layer_norm", .attrs = {{"normalized_shape", Shape{4}}},
                         .inputs = {f64({3, 4}), f64({4}), f64({4})}}));
  EXPECT_TRUE(checkGrad({.op = "layer_norm", .attrs = {{"normalized_shape", Shape{3, 2}}, {"eps", 0.1}},
                         .inputs = {f64({2, 3, 2}), f64({3, 2}), f64({3, 2})}}));
  // The whole tensor is one row.
  EXPECT_TRUE(checkGrad({.op = "layer_norm", .attrs = {{"normalized_shape", Shape{2, 3}}},
                         .inputs = {f64({2, 3}), f64({2, 3}), f64({2, 3})}}));
}

TEST(GradNorm, GroupNorm) {
  EXPECT_TRUE(checkGrad({.op = "group_norm", .attrs = {{"num_groups", int64_t{2}}},
                         .inputs = {f64({2, 4, 3}), f64({4}), f64({4})}}));
  EXPECT_TRUE(checkGrad({.op = "group_norm", .attrs = {{"num_groups", int64_t{3}}, {"eps", 0.1}},
                         .inputs = {f64({2, 6, 2, 2}), f64({6}), f64({6})}}));
  // One group (layer norm over C, H, W) and one group per channel (instance norm).
  EXPECT_TRUE(checkGrad({.op = "group_norm", .attrs = {{"num_groups", int64_t{1}}},
                         .inputs = {f64({2, 3, 2}), f64({3}), f64({3})}}));
  EXPECT_TRUE(checkGrad({.op = "group_norm", .attrs = {{"num_groups", int64_t{3}}},
                         .inputs = {f64({2, 3, 4}), f64({3}), f64({3})}}));
  // No spatial dims.
  EXPECT_TRUE(checkGrad({.op = "group_norm", .attrs = {{"num_groups", int64_t{2}}},
                         .inputs = {f64({3, 4}), f64({4}), f64({4})}}));
}

TEST(GradNorm, SoftmaxAnyDim) {
  for (const char* op : {"softmax", "log_softmax"}) {
    for (int64_t dim : {0, 1, 2, -1})
      EXPECT_TRUE(checkGrad({.op = op, .attrs = {{"dim", dim}}, .inputs = {f64({3, 4, 2})}, .lo = -3, .hi = 3}))
          << op << " dim " << dim;
    EXPECT_TRUE(checkGrad({.op = op, .attrs = {{"dim", int64_t{0}}}, .inputs = {f64({5})}, .lo = -3, .hi = 3}));
    EXPECT_TRUE(checkGrad({.op = op, .attrs = {{"dim", int64_t{-1}}}, .inputs = {f64({4, 1})}}));
    EXPECT_TRUE(checkGrad({.op = op, .attrs = {{"dim", int64_t{0}}}, .inputs = {f64({})}}));  // 0-d: gradient 0
  }
}

}  // namespace
}  // namespace kiln::testing
