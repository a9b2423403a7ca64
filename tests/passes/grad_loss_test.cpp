// Finite-difference checks of the loss gradient rules (double precision):
// cross_entropy and nll_loss over every input layout ([C], [N, C],
// [N, C, d...]), reduction and ignore_index, cross_entropy's label
// smoothing, and mse_loss with broadcasting. Targets are fixed inputs and
// include ignored entries. Cases FD cannot check (the loss is nan when
// every target is ignored under "mean") are checked against PyTorch's
// values directly, as is one label-smoothing case.
#include <cmath>

#include "backend/cpu/cpu_executor.h"
#include "passes/autodiff.h"
#include "tests/passes/grad_check.h"

namespace kiln::testing {
namespace {

const char* const kReductions[] = {"mean", "sum", "none"};

Tensor targets(Shape s, std::vector<int64_t> v) {
  return Tensor::fromInt64s(std::move(s), v);
}

/// A class-loss case: input of shape `x`, fixed targets `t` (input 1).
GradCase classCase(const char* op, Shape x, const Tensor& t, AttrMap attrs) {
  return {.op = op, .attrs = std::move(attrs), .inputs = {f64(std::move(x)), t.type()}, .fixed = {{1, t}}};
}

TEST(GradLoss, CrossEntropy2d) {
  const Tensor t = targets({5}, {0, -100, 3, 1, 2});
  for (const char* r : kReductions)
    for (double s : {0.0, 0.2})
      EXPECT_TRUE(
          checkGrad(classCase("cross_entropy", {5, 4}, t, {{"reduction", std::string(r)}, {"label_smoothing", s}})))
          << r << " smoothing " << s;
}

TEST(GradLoss, CrossEntropyIgnoreIndexIsAClass) {
  // ignore_index may name a real class: those targets are skipped.
  const Tensor t = targets({6}, {1, 0, 2, 1, 3, 2});
  for (const char* r : kReductions)
    EXPECT_TRUE(
        checkGrad(classCase("cross_entropy", {6, 4}, t,
                            {{"reduction", std::string(r)}, {"ignore_index", int64_t{1}}, {"label_smoothing", 0.1}})))
        << r;
}

TEST(GradLoss, CrossEntropySpatial) {
  const Tensor t3 = targets({2, 3}, {0, 2, -100, 1, 1, 0});
  const Tensor t4 = targets({2, 2, 2}, {2, -100, 0, 1, 1, 2, -100, 0});
  for (const char* r : kReductions) {
    EXPECT_TRUE(checkGrad(classCase("cross_entropy", {2, 3, 3}, t3, {{"reduction", std::string(r)}}))) << r;
    EXPECT_TRUE(checkGrad(
        classCase("cross_entropy", {2, 3, 2, 2}, t4, {{"reduction", std::string(r)}, {"label_smoothing", 0.3}})))
        << r;
  }
}

TEST(GradLoss, CrossEntropyUnbatched) {
  for (const char* r : kReductions)
    for (double s : {0.0, 0.25}) {
      EXPECT_TRUE(checkGrad(
          classCase("cross_entropy", {4}, targets({}, {2}), {{"reduction", std::string(r)}, {"label_smoothing", s}})))
          << r;
      if (std::string(r) != "mean")  // an ignored sole target: 0, its gradient 0
        EXPECT_TRUE(checkGrad(classCase("cross_entropy", {4}, targets({}, {-100}),
                                        {{"reduction", std::string(r)}, {"label_smoothing", s}})))
            << r;
    }
}

TEST(GradLoss, NllLoss) {
  const Tensor t2 = targets({5}, {0, -100, 3, 1, 2});
  const Tensor t3 = targets({2, 3}, {0, 2, -100, 1, 1, 0});
  for (const char* r : kReductions) {
    AttrMap a{{"reduction", std::string(r)}};
    EXPECT_TRUE(checkGrad(classCase("nll_loss", {5, 4}, t2, a))) << r;
    EXPECT_TRUE(checkGrad(classCase("nll_loss", {2, 3, 3}, t3, a))) << r;
    EXPECT_TRUE(checkGrad(classCase("nll_loss", {4}, targets({}, {3}), a))) << r;
    a["ignore_index"] = int64_t{2};
    EXPECT_TRUE(checkGrad(classCase("nll_loss", {5, 4}, targets({5}, {2, 0, 2, 3, 1}), a))) << r;
  }
}

TEST(GradLoss, MseLoss) {
  for (const char* r : kReductions) {
    AttrMap a{{"reduction", std::string(r)}};
    EXPECT_TRUE(checkGrad({.op = "mse_loss", .attrs = a, .inputs = {f64({3, 4}), f64({3, 4})}})) << r;
    // Broadcasting either way; both inputs get gradients summed to their shape.
    EXPECT_TRUE(checkGrad({.op = "mse_loss", .attrs = a, .inputs = {f64({3, 4}), f64({4})}})) << r;
    EXPECT_TRUE(checkGrad({.op = "mse_loss", .attrs = a, .inputs = {f64({1, 4}), f64({3, 1})}})) << r;
    EXPECT_TRUE(checkGrad({.op = "mse_loss", .attrs = a, .inputs = {f64({}), f64({2, 3})}})) << r;
  }
}

/// dL/dx of `op(x, target)` for loss = sum(op(...)), run on the CPU executor.
Tensor lossGrad(const char* op, const Tensor& x, const Tensor& t, AttrMap attrs) {
  Graph g;
  Value* xv = g.addInput("x", x.type(), ValueRole::Param);
  Value* tv = g.addInput("t", t.type(), ValueRole::Data);
  Value* loss = g.add("sum", {g.add(op, {xv, tv}, std::move(attrs))});
  g.addOutput(loss, "loss", OutputRole::Loss);
  auto grads = differentiate(g, loss, {xv});
  if (!grads || !(*grads)[0]) ADD_FAILURE() << "no gradient";
  if (!grads || !(*grads)[0]) return {};
  g.addOutput((*grads)[0], "grad", OutputRole::Gradient);
  auto ex = CpuExecutor::create(g);
  if (!ex) ADD_FAILURE() << ex.error().message;
  if (!ex) return {};
  auto out = ex->run({{"x", x}, {"t", t}});
  if (!out) ADD_FAILURE() << out.error().message;
  if (!out) return {};
  return (*out)[1];
}

TEST(GradLoss, AllIgnoredMeanGivesZeroGradient) {
  // PyTorch: the loss is 0/0 = nan, but no element receives a gradient.
  Tensor x(f64({3, 4}));
  for (int64_t i = 0; i < x.numel(); ++i) x.set(i, 0.1 * static_cast<double>(i) - 0.5);
  const Tensor t = targets({3}, {-100, -100, -100});
  for (double s : {0.0, 0.2}) {
    Tensor gx = lossGrad("cross_entropy", x, t, {{"label_smoothing", s}});
    ASSERT_EQ(gx.numel(), 12);
    for (int64_t i = 0; i < gx.numel(); ++i) EXPECT_EQ(gx.at(i), 0.0) << "element " << i;
  }
  Tensor gn = lossGrad("nll_loss", x, t, {});
  ASSERT_EQ(gn.numel(), 12);
  for (int64_t i = 0; i < gn.numel(); ++i) EXPECT_EQ(gn.at(i), 0.0) << "element " << i;
}

TEST(GradLoss, CrossEntropyMatchesPyTorch) {
  // torch 1.13: x = arange(12).reshape(3, 4) * 0.3 - 1.5 (f64), target [1, -100, 3],
  // F.cross_entropy(x, t, label_smoothing=0.2) backward; the smoothing term is
  // divided by the number of targets that are not ignored.
  Tensor x(f64({3, 4}));
  for (int64_t i = 0; i < x.numel(); ++i) x.set(i, 0.3 * static_cast<double>(i) - 1.5);
  Tensor gx = lossGrad("cross_entropy", x, targets({3}, {1, -100, 3}), {{"label_smoothing", 0.2}});
  const double expect[12] = {
      0.050396805253105366, -0.32322495836600307, 0.11238193634106519, 0.1604462167718326,  0, 0, 0, 0,
      0.05039680525310535,  0.0767750416339969,   0.11238193634106516, -0.23955378322816748};
  ASSERT_EQ(gx.numel(), 12);
  for (int64_t i = 0; i < 12; ++i) EXPECT_NEAR(gx.at(i), expect[i], 1e-12) << "element " << i;
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

TEST(GradLoss, BackwardOpsRejectBadInputs) {
  const TensorType x = f64({4, 3}), t{DType::I64, {4}}, scalar = f64({});
  auto has = [](const std::string& msg, const char* part) { return msg.find(part) != std::string::npos; };
  EXPECT_TRUE(has(buildError("cross_entropy_backward", {scalar, x, t}, {{"reduction", std::string("avg")}}),
                  "reduction must be"));
  EXPECT_TRUE(has(buildError("cross_entropy_backward", {f64({4}), x, t}, {}), "loss's shape"));
  EXPECT_TRUE(has(buildError("cross_entropy_backward", {scalar, x, f64({4})}, {}), "class indices"));
  EXPECT_TRUE(has(buildError("cross_entropy_backward", {scalar, x, {DType::I64, {3}}}, {}), "does not match"));
  EXPECT_TRUE(has(buildError("cross_entropy_backward", {scalar, x, t}, {{"label_smoothing", 1.5}}), "[0, 1]"));
  EXPECT_TRUE(has(buildError("nll_loss_backward", {scalar, t}, {{"num_classes", int64_t{-1}}}), "non-negative"));
  EXPECT_TRUE(has(buildError("nll_loss_backward", {scalar, t}, {}), "num_classes"));
  EXPECT_EQ(buildError("nll_loss_backward", {scalar, t}, {{"num_classes", int64_t{3}}}), "");
}

TEST(GradLoss, TargetOutOfRangeIsAnErrorInTheBackwardKernel) {
  // A direct backward node (no forward ran first to validate the targets).
  Graph g;
  Value* gv = g.addInput("g", f64({}), ValueRole::Data);
  Value* x = g.addInput("x", f64({2, 3}), ValueRole::Data);
  Value* t = g.addInput("t", {DType::I64, {2}}, ValueRole::Data);
  g.addOutput(g.add("cross_entropy_backward", {gv, x, t}), "ce");
  g.addOutput(g.add("nll_loss_backward", {gv, t}, {{"num_classes", int64_t{3}}}), "nll");
  auto ex = CpuExecutor::create(g);
  ASSERT_TRUE(ex) << ex.error().message;
  auto out = ex->run({{"g", Tensor::scalar(DType::F64, 1.0)}, {"x", Tensor(f64({2, 3}))}, {"t", targets({2}, {0, 3})}});
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().message.find("target 3 at position 1 is out of range"), std::string::npos)
      << out.error().message;
}

TEST(GradLoss, F32MatchesF64) {
  // The f32 kernels agree with the f64 ones to f32 precision.
  Tensor x(f64({16, 10}));
  for (int64_t i = 0; i < x.numel(); ++i) x.set(i, std::sin(0.7 * static_cast<double>(i)) * 4);
  std::vector<int64_t> tv;
  for (int64_t i = 0; i < 16; ++i) tv.push_back(i % 5 == 0 ? -100 : (i * 3) % 10);
  const Tensor t = targets({16}, tv);
  for (const char* r : kReductions)
    for (const char* op : {"cross_entropy", "nll_loss"}) {
      AttrMap a{{"reduction", std::string(r)}};
      if (std::string(op) == "cross_entropy") a["label_smoothing"] = 0.1;
      Tensor ref = lossGrad(op, x, t, a), got = lossGrad(op, x.to(DType::F32), t, a);
      ASSERT_EQ(got.numel(), ref.numel());
      for (int64_t i = 0; i < ref.numel(); ++i) EXPECT_NEAR(got.at(i), ref.at(i), 1e-6) << op << " " << r << " " << i;
    }
}

}  // namespace
}  // namespace kiln::testing
