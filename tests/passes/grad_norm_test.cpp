// Finite-difference checks of the normalization gradient rules (double
// precision): batch_norm (training and eval), layer_norm, group_norm,
// softmax and log_softmax, plus the structural guarantee that batch_norm's
// running statistics neither receive nor pass on gradients.
#include <algorithm>
#include <cmath>
#include <random>

#include "backend/cpu/cpu_executor.h"
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
  EXPECT_TRUE(checkGrad(
      {.op = "layer_norm", .attrs = {{"normalized_shape", Shape{4}}}, .inputs = {f64({3, 4}), f64({4}), f64({4})}}));
  EXPECT_TRUE(checkGrad({.op = "layer_norm",
                         .attrs = {{"normalized_shape", Shape{3, 2}}, {"eps", 0.1}},
                         .inputs = {f64({2, 3, 2}), f64({3, 2}), f64({3, 2})}}));
  // The whole tensor is one row.
  EXPECT_TRUE(checkGrad({.op = "layer_norm",
                         .attrs = {{"normalized_shape", Shape{2, 3}}},
                         .inputs = {f64({2, 3}), f64({2, 3}), f64({2, 3})}}));
}

TEST(GradNorm, GroupNorm) {
  EXPECT_TRUE(checkGrad(
      {.op = "group_norm", .attrs = {{"num_groups", int64_t{2}}}, .inputs = {f64({2, 4, 3}), f64({4}), f64({4})}}));
  EXPECT_TRUE(checkGrad({.op = "group_norm",
                         .attrs = {{"num_groups", int64_t{3}}, {"eps", 0.1}},
                         .inputs = {f64({2, 6, 2, 2}), f64({6}), f64({6})}}));
  // One group (layer norm over C, H, W) and one group per channel (instance norm).
  EXPECT_TRUE(checkGrad(
      {.op = "group_norm", .attrs = {{"num_groups", int64_t{1}}}, .inputs = {f64({2, 3, 2}), f64({3}), f64({3})}}));
  EXPECT_TRUE(checkGrad(
      {.op = "group_norm", .attrs = {{"num_groups", int64_t{3}}}, .inputs = {f64({2, 3, 4}), f64({3}), f64({3})}}));
  // No spatial dims.
  EXPECT_TRUE(checkGrad(
      {.op = "group_norm", .attrs = {{"num_groups", int64_t{2}}}, .inputs = {f64({3, 4}), f64({4}), f64({4})}}));
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

/// The message of the KilnException building `op` throws ("" when none).
std::string buildError(const char* op, std::vector<TensorType> types, AttrMap attrs) {
  Graph g;
  std::vector<Value*> ins;
  for (size_t i = 0; i < types.size(); ++i)
    ins.push_back(g.addInput("x" + std::to_string(i), types[i], ValueRole::Data));
  try {
    g.create(op, ins, std::move(attrs));
  } catch (const KilnException& e) {
    return e.what();
  }
  return "";
}

TEST(GradNorm, BackwardOpsRejectBadShapes) {
  const TensorType x = f64({4, 3}), c = f64({3});
  EXPECT_NE(buildError("batch_norm_backward", {x, x, c}, {}).find("eval mode takes 5 inputs"), std::string::npos);
  EXPECT_NE(buildError("batch_norm_backward", {x, x, c, c, c}, {{"training", int64_t{1}}}).find("takes 3 inputs"),
            std::string::npos);
  EXPECT_NE(buildError("batch_norm_backward", {x, x, f64({4})}, {{"training", int64_t{1}}}).find("weight"),
            std::string::npos);
  EXPECT_NE(buildError("layer_norm_backward", {x, f64({4, 2}), c}, {{"normalized_shape", Shape{3}}}).find("gradient"),
            std::string::npos);
  EXPECT_NE(buildError("layer_norm_backward", {x, x, c}, {{"normalized_shape", Shape{4}}}).find("normalized_shape"),
            std::string::npos);
  EXPECT_NE(buildError("group_norm_backward", {x, x, c}, {{"num_groups", int64_t{2}}}).find("groups"),
            std::string::npos);
  EXPECT_NE(buildError("softmax_backward", {x, x}, {{"dim", int64_t{2}}}).find("out of range"), std::string::npos);
  EXPECT_NE(buildError("log_softmax_backward", {x, {DType::I64, {4, 3}}}, {{"dim", int64_t{0}}}).find("floating"),
            std::string::npos);
}

/// Gradients of sum(op(inputs)[0] * weights) w.r.t. inputs 0..wrt-1, with
/// every floating tensor converted to `dt`, as f64 tensors.
std::vector<Tensor> gradsIn(DType dt, const char* op, const AttrMap& attrs, const std::vector<Tensor>& inputs,
                            const Tensor& weights, size_t wrt) {
  Graph g;
  std::vector<Value*> ins, params;
  TensorMap bound;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string name = "x" + std::to_string(i);
    ins.push_back(g.addInput(name, {dt, inputs[i].shape()}, i < wrt ? ValueRole::Param : ValueRole::Buffer));
    if (i < wrt) params.push_back(ins.back());
    bound[name] = inputs[i].to(dt);
  }
  Value* w = g.addInput("w", {dt, weights.shape()}, ValueRole::Data);
  bound["w"] = weights.to(dt);
  Value* loss = g.add("sum", {g.add("mul", {g.create(op, ins, attrs)->output(0), w})});
  g.addOutput(loss, "loss", OutputRole::Loss);
  auto grads = differentiate(g, loss, params);
  if (!grads) ADD_FAILURE() << grads.error().message;
  if (!grads) return {};
  for (Value* v : *grads) g.addOutput(v, "grad", OutputRole::Gradient);
  auto ex = CpuExecutor::create(g);
  if (!ex) ADD_FAILURE() << ex.error().message;
  if (!ex) return {};
  auto out = ex->run(bound);
  if (!out) ADD_FAILURE() << out.error().message;
  if (!out) return {};
  std::vector<Tensor> result;
  for (size_t k = 1; k < out->size(); ++k) result.push_back((*out)[k].to(DType::F64));
  return result;
}

Tensor uniform(Shape s, double lo, double hi, std::mt19937_64& rng) {
  Tensor t(f64(std::move(s)));
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, u(rng));
  return t;
}

/// The f32 kernels agree with the f64 ones to f32 precision (max error
/// relative to the largest gradient element).
void expectF32MatchesF64(const char* op, const AttrMap& attrs, const std::vector<Tensor>& inputs, size_t wrt,
                         const Tensor& weights) {
  auto ref = gradsIn(DType::F64, op, attrs, inputs, weights, wrt);
  auto got = gradsIn(DType::F32, op, attrs, inputs, weights, wrt);
  ASSERT_EQ(ref.size(), wrt);
  ASSERT_EQ(got.size(), wrt);
  for (size_t k = 0; k < wrt; ++k) {
    double err = 0, scale = 1e-30;
    for (int64_t i = 0; i < ref[k].numel(); ++i) {
      err = std::max(err, std::abs(ref[k].at(i) - got[k].at(i)));
      scale = std::max(scale, std::abs(ref[k].at(i)));
    }
    EXPECT_LT(err / scale, 5e-5) << op << " input " << k;
  }
}

TEST(GradNorm, F32MatchesF64) {
  std::mt19937_64 rng(7);
  // x far from zero mean: centred arithmetic must keep f32 precision.
  const Tensor x = uniform({6, 4, 5, 5}, 99, 101, rng);
  const Tensor w4 = uniform({4}, 0.5, 1.5, rng), b4 = uniform({4}, -1, 1, rng);
  const Tensor loss_w = uniform({6, 4, 5, 5}, -1, 1, rng);
  const Tensor rv = uniform({4}, 0.5, 2, rng), rm = uniform({4}, 99, 101, rng);
  for (int64_t training : {0, 1})
    expectF32MatchesF64("batch_norm", {{"training", training}}, {x, w4, b4, rm, rv}, 3, loss_w);
  expectF32MatchesF64("group_norm", {{"num_groups", int64_t{2}}}, {x, w4, b4}, 3, loss_w);
  const Tensor w5 = uniform({5, 5}, 0.5, 1.5, rng), b5 = uniform({5, 5}, -1, 1, rng);
  expectF32MatchesF64("layer_norm", {{"normalized_shape", Shape{5, 5}}}, {x, w5, b5}, 3, loss_w);
  const Tensor logits = uniform({6, 4, 5, 5}, -5, 5, rng);
  for (const char* op : {"softmax", "log_softmax"}) expectF32MatchesF64(op, {{"dim", int64_t{1}}}, {logits}, 1, loss_w);
}

}  // namespace
}  // namespace kiln::testing
