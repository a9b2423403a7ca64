// CPU loss kernels against libtorch: cross_entropy and nll_loss with every
// reduction, ignore_index (including all targets ignored), label smoothing,
// spatial [N, C, H, W] inputs and a 1-D input with a scalar target;
// mse_loss with broadcasting; out-of-range targets fail with a clear message.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/torch/torch_compare.h"

namespace kiln::testing {
namespace {

class KernelsLoss : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(7); }
};

const std::vector<std::pair<std::string, int64_t>> kReductions = {
    {"none", at::Reduction::None}, {"mean", at::Reduction::Mean}, {"sum", at::Reduction::Sum}};

/// Targets in [0, classes) with roughly a quarter set to `ignore`.
torch::Tensor targets(std::vector<int64_t> shape, int64_t classes, int64_t ignore) {
  auto t = torch::randint(0, classes, shape, torch::kInt64);
  return torch::where(torch::rand(shape) < 0.25, torch::full(shape, ignore, torch::kInt64), t);
}

void checkCrossEntropy(const torch::Tensor& x, const torch::Tensor& t, int64_t ignore, double smoothing,
                       double tol = 1e-5) {
  for (const auto& [name, red] : kReductions) {
    auto out =
        runOp("cross_entropy", {x, t}, {{"reduction", name}, {"ignore_index", ignore}, {"label_smoothing", smoothing}});
    ASSERT_EQ(out.size(), 1u);
    expectClose(out[0], torch::cross_entropy_loss(x, t, {}, red, ignore, smoothing), tol,
                "cross_entropy " + name + " smoothing " + std::to_string(smoothing));
  }
}

void checkNll(const torch::Tensor& x, const torch::Tensor& t, int64_t ignore) {
  for (const auto& [name, red] : kReductions) {
    auto out = runOp("nll_loss", {x, t}, {{"reduction", name}, {"ignore_index", ignore}});
    ASSERT_EQ(out.size(), 1u);
    expectClose(out[0], torch::nll_loss_nd(x, t, {}, red, ignore), 1e-5, "nll_loss " + name);
  }
}

TEST_F(KernelsLoss, CrossEntropy2DEveryReduction) {
  auto x = torch::randn({16, 10}) * 3;
  checkCrossEntropy(x, torch::randint(0, 10, {16}, torch::kInt64), -100, 0.0);
}
TEST_F(KernelsLoss, CrossEntropyIgnoreIndex) {
  auto x = torch::randn({32, 7});
  checkCrossEntropy(x, targets({32}, 7, -100), -100, 0.0);
  checkCrossEntropy(x, targets({32}, 7, 3), 3, 0.0);  // ignore_index that is also a valid class
}
TEST_F(KernelsLoss, CrossEntropyLabelSmoothing) {
  auto x = torch::randn({20, 6}) * 2;
  checkCrossEntropy(x, torch::randint(0, 6, {20}, torch::kInt64), -100, 0.1);
  checkCrossEntropy(x, targets({20}, 6, -1), -1, 0.25);
}
TEST_F(KernelsLoss, CrossEntropySpatialTargets) {
  auto x = torch::randn({2, 5, 4, 3});
  checkCrossEntropy(x, targets({2, 4, 3}, 5, 255), 255, 0.0);
  checkCrossEntropy(x, targets({2, 4, 3}, 5, 255), 255, 0.2);
}
TEST_F(KernelsLoss, CrossEntropy1DInputScalarTarget) {
  auto x = torch::randn({9});
  checkCrossEntropy(x, torch::tensor(4, torch::kInt64), -100, 0.0);
  checkCrossEntropy(x, torch::tensor(2, torch::kInt64), -100, 0.3);
}
TEST_F(KernelsLoss, CrossEntropyF64AndI32Targets) {
  auto x = torch::randn({12, 5}, torch::kFloat64);
  checkCrossEntropy(x, targets({12}, 5, -100), -100, 0.1, 1e-12);
  auto xf = torch::randn({6, 4});
  auto t = torch::randint(0, 4, {6}, torch::kInt64);
  auto out = runOp("cross_entropy", {xf, t.to(torch::kInt32)});
  ASSERT_EQ(out.size(), 1u);
  expectClose(out[0], torch::cross_entropy_loss(xf, t), 1e-5, "i32 targets");
}
TEST_F(KernelsLoss, CrossEntropyAllIgnoredMeanIsNaN) {
  auto x = torch::randn({4, 3});
  auto t = torch::full({4}, -100, torch::kInt64);
  auto out = runOp("cross_entropy", {x, t});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(torch::cross_entropy_loss(x, t).isnan().item<bool>());
  EXPECT_TRUE(out[0].isnan().item<bool>());
}

/// cross_entropy {dtype=f32} over bf16/f16 logits (what `fuse` makes of
/// amp's f32 copy in front of the loss) and its backward from an f32 g: the
/// same bits as the f32 kernels over the widened copy, the backward's
/// rounded to the logits' dtype, as the cast after it rounded. Contiguous
/// rows (the row loops), spatial targets (strided classes), a 1-D input.
TEST_F(KernelsLoss, CrossEntropyReadsLowPrecisionLogitsWidened) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{37, 1000}, {37}}, {{3, 50, 7}, {3, 7}}, {{33}, {}}};
  for (torch::ScalarType low : {torch::kBFloat16, torch::kHalf})
    for (const auto& [xs, ts] : shapes) {
      auto x = (torch::randn(xs) * 4).to(low);
      const int64_t classes = xs.size() == 1 ? xs[0] : xs[1];
      auto t = ts.empty() ? torch::tensor(5, torch::kInt64) : targets(ts, classes, -100);
      for (double smoothing : {0.0, 0.1})
        for (const auto& [name, red] : kReductions) {
          const std::string what = std::string(c10::toString(low)) + " " + shapeStr(xs) + " " + name +
                                   " smoothing " + std::to_string(smoothing);
          const AttrMap attrs = {{"reduction", name}, {"ignore_index", int64_t{-100}}, {"label_smoothing", smoothing}};
          AttrMap widened = attrs;
          widened["dtype"] = DType::F32;
          auto loss = runOp("cross_entropy", {x, t}, widened);
          auto loss_f32 = runOp("cross_entropy", {x.to(torch::kFloat32), t}, attrs);
          ASSERT_EQ(loss.size(), 1u) << what;
          ASSERT_EQ(loss[0].scalar_type(), torch::kFloat32) << what;
          EXPECT_TRUE(torch::equal(loss[0], loss_f32[0])) << what << ": not the f32 kernel's bits";
          expectClose(loss[0], torch::cross_entropy_loss(x.to(torch::kFloat32), t, {}, red, -100, smoothing), 1e-5,
                      what);

          auto g = name == "none" ? torch::randn(t.sizes()) : torch::tensor(0.75f);
          auto grad = runOp("cross_entropy_backward", {g, x, t}, attrs);
          auto grad_f32 = runOp("cross_entropy_backward", {g, x.to(torch::kFloat32), t}, attrs);
          ASSERT_EQ(grad.size(), 1u) << what;
          ASSERT_EQ(grad[0].scalar_type(), low) << what;
          EXPECT_TRUE(torch::equal(grad[0], grad_f32[0].to(low))) << what << ": not the f32 gradient rounded once";
        }
    }
}

TEST_F(KernelsLoss, CrossEntropyDTypeOnlyWidensLowPrecision) {
  Graph g;
  Value* x = g.addInput("x", {DType::F32, {3, 4}}, ValueRole::Data);
  Value* t = g.addInput("t", {DType::I64, {3}}, ValueRole::Data);
  try {
    g.add("cross_entropy", {x, t}, {{"dtype", DType::BF16}});
    ADD_FAILURE() << "cross_entropy {dtype=bf16} over f32 logits was accepted";
  } catch (const KilnException& e) {
    EXPECT_NE(std::string(e.what()).find("only f32 over bf16/f16 logits"), std::string::npos) << e.what();
  }
}

TEST_F(KernelsLoss, NllLoss) {
  auto x = torch::log_softmax(torch::randn({16, 8}), 1);
  checkNll(x, targets({16}, 8, -100), -100);
  auto xs = torch::log_softmax(torch::randn({3, 4, 5, 2}), 1);
  checkNll(xs, targets({3, 5, 2}, 4, 1), 1);
}

TEST_F(KernelsLoss, OutOfRangeTargetFails) {
  Graph g;
  Value* x = g.addInput("x", {DType::F32, {3, 4}}, ValueRole::Data);
  Value* t = g.addInput("t", {DType::I64, {3}}, ValueRole::Data);
  g.addOutput(g.add("cross_entropy", {x, t}), "loss");
  auto ex = CpuExecutor::create(g);
  ASSERT_TRUE(ex.ok());
  for (int64_t bad : {4, -3}) {
    auto r = ex->run(
        {{"x", fromTorch(torch::randn({3, 4}))}, {"t", fromTorch(torch::tensor(std::vector<int64_t>{0, bad, 1}))}});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("target " + std::to_string(bad) + " at position 1 is out of range for 4 classes"),
              std::string::npos)
        << r.error().message;
  }
}

TEST_F(KernelsLoss, MseEveryReductionAndBroadcast) {
  for (const auto& [name, red] : kReductions) {
    auto a = torch::randn({4, 5, 6}), b = torch::randn({4, 5, 6});
    auto out = runOp("mse_loss", {a, b}, {{"reduction", name}});
    ASSERT_EQ(out.size(), 1u);
    expectClose(out[0], torch::mse_loss(a, b, red), 1e-5, "mse " + name);
    auto bb = torch::randn({5, 1});
    out = runOp("mse_loss", {a, bb}, {{"reduction", name}});
    ASSERT_EQ(out.size(), 1u);
    expectClose(out[0], torch::mse_loss(a, bb, red), 1e-5, "mse broadcast " + name);
    auto ab = torch::randn({3, 1}), bc = torch::randn({1, 7});
    out = runOp("mse_loss", {ab, bc}, {{"reduction", name}});
    ASSERT_EQ(out.size(), 1u);
    expectClose(out[0], torch::mse_loss(ab, bc, red), 1e-5, "mse both broadcast " + name);
  }
  auto a = torch::randn({10}, torch::kFloat64), b = torch::randn({10}, torch::kFloat64);
  auto out = runOp("mse_loss", {a, b});
  ASSERT_EQ(out.size(), 1u);
  expectClose(out[0], torch::mse_loss(a, b), 1e-12, "f64");
}

}  // namespace
}  // namespace kiln::testing
