// Finite-difference checks of the reduction gradient rules (double
// precision), and PyTorch's values where FD cannot decide (ties in
// amax/amin, NaN extremes, var with N == correction). prod is multilinear, so
// FD is exact even at its zeros: those cases go through checkGraphGrad with
// chosen values.
#include <cmath>
#include <limits>

#include "backend/cpu/cpu_executor.h"
#include "passes/autodiff.h"
#include "tests/passes/grad_check.h"

namespace kiln::testing {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

Tensor values(Shape s, const std::vector<double>& v) {
  Tensor t(DType::F64, std::move(s));
  for (size_t i = 0; i < v.size(); ++i) t.set(static_cast<int64_t>(i), v[i]);
  return t;
}

AttrMap dims(std::vector<int64_t> d, bool keepdim = false) {
  return {{"dims", std::move(d)}, {"keepdim", int64_t{keepdim}}};
}

/// Graph x -> op(x) -> sum; returns the gradient of x at `x` (undefined on failure).
Tensor gradAt(const std::string& op, const AttrMap& attrs, const Tensor& x) {
  Graph g;
  Value* in = g.addInput("x", x.type(), ValueRole::Param);
  Value* loss = g.add("sum", {g.add(op, {in}, attrs)});
  g.addOutput(loss, "loss", OutputRole::Loss);
  auto grads = differentiate(g, loss, {in});
  if (!grads) return ADD_FAILURE() << grads.error().message, Tensor();
  g.addOutput((*grads)[0], "grad", OutputRole::Gradient);
  auto ex = CpuExecutor::create(g, {.seed = 1, .num_threads = 1});
  if (!ex) return ADD_FAILURE() << ex.error().message, Tensor();
  auto out = ex->run({{"x", x}});
  if (!out) return ADD_FAILURE() << out.error().message, Tensor();
  return (*out)[1];
}

/// FD check of sum(op(x) * w) at the given x (not random).
::testing::AssertionResult checkAt(const std::string& op, const AttrMap& attrs, const Tensor& x) {
  Graph g;
  Value* in = g.addInput("x", x.type(), ValueRole::Param);
  Value* y = g.add(op, {in}, attrs);
  Value* w = g.addInput("w", y->type(), ValueRole::Data);
  Tensor wv(y->type());
  for (int64_t i = 0; i < wv.numel(); ++i) wv.set(i, 0.5 + 0.25 * static_cast<double>(i % 5));
  g.addOutput(g.add("sum", {g.add("mul", {y, w})}), "loss", OutputRole::Loss);
  return checkGraphGrad(g, {{"x", x}, {"w", wv}}, {"x"});
}

::testing::AssertionResult same(const Tensor& got, const std::vector<double>& want) {
  if (!got.defined()) return ::testing::AssertionFailure() << "no gradient";
  if (got.numel() != static_cast<int64_t>(want.size()))
    return ::testing::AssertionFailure() << "got " << got.numel() << " elements, want " << want.size();
  for (size_t i = 0; i < want.size(); ++i) {
    double a = got.at(static_cast<int64_t>(i)), b = want[i];
    if (!(std::isnan(a) && std::isnan(b)) && !(a == b || std::abs(a - b) <= 1e-4))
      return ::testing::AssertionFailure() << "element " << i << ": got " << a << ", want " << b;
  }
  return ::testing::AssertionSuccess();
}

TEST(GradReduction, SumMean) {
  for (const char* op : {"sum", "mean"}) {
    EXPECT_TRUE(checkGrad({.op = op, .inputs = {f64({3, 4})}}));
    EXPECT_TRUE(checkGrad({.op = op, .attrs = dims({0, 2}), .inputs = {f64({2, 3, 4})}}));
    EXPECT_TRUE(checkGrad({.op = op, .attrs = dims({-1}, true), .inputs = {f64({2, 3, 4})}}));
  }
}

TEST(GradReduction, AmaxAmin) {
  for (const char* op : {"amax", "amin"}) {
    EXPECT_TRUE(checkGrad({.op = op, .inputs = {f64({3, 4})}}));
    EXPECT_TRUE(checkGrad({.op = op, .attrs = dims({1}), .inputs = {f64({3, 4})}}));
    EXPECT_TRUE(checkGrad({.op = op, .attrs = dims({0, 2}, true), .inputs = {f64({2, 3, 4})}}));
    EXPECT_TRUE(checkGrad({.op = op, .inputs = {f64({})}}));
  }
  // Ties share the gradient evenly; a NaN extreme gives its slice NaN (as PyTorch).
  Tensor x = values({2, 3}, {1, 3, 3, kNaN, 1, 2});
  EXPECT_TRUE(same(gradAt("amax", dims({1}), x), {0, 0.5, 0.5, kNaN, kNaN, kNaN}));
  EXPECT_TRUE(same(gradAt("amin", dims({0}), values({2, 3}, {1, 3, 2, 1, 1, 2})), {0.5, 0, 0.5, 0.5, 1, 0.5}));
  EXPECT_TRUE(same(gradAt("amax", {}, values({2, 2}, {4, 1, 4, 4})), {1.0 / 3, 0, 1.0 / 3, 1.0 / 3}));
}

TEST(GradReduction, Prod) {
  EXPECT_TRUE(checkGrad({.op = "prod", .inputs = {f64({3, 4})}, .lo = 0.5, .hi = 1.5}));
  EXPECT_TRUE(checkGrad({.op = "prod", .attrs = dims({1}), .inputs = {f64({3, 4})}, .kinks = {0}, .kink_margin = 0.2}));
  EXPECT_TRUE(checkGrad({.op = "prod", .attrs = dims({0, 2}, true), .inputs = {f64({2, 3, 2})}}));
  EXPECT_TRUE(checkGrad({.op = "prod", .inputs = {f64({})}}));
  // Zeros: none, one, two in a slice (rows), over one dim and over all.
  Tensor x = values({3, 3}, {2, 0, 3, 1, -2, 3, 0, 5, 0});
  EXPECT_TRUE(checkAt("prod", dims({1}), x));
  EXPECT_TRUE(checkAt("prod", dims({0}, true), x));
  EXPECT_TRUE(checkAt("prod", {}, values({4}, {2, 0, 3, 4})));
  EXPECT_TRUE(checkAt("prod", {}, values({4}, {2, 0, 3, 0})));
  EXPECT_TRUE(same(gradAt("prod", dims({1}), values({2, 3}, {2, 0, 3, 1, 2, 3})), {0, 6, 0, 6, 3, 2}));
  EXPECT_TRUE(same(gradAt("prod", {}, values({4}, {2, 0, 3, 0})), {0, 0, 0, 0}));
  // The f32 kernel too.
  Tensor g32 = gradAt("prod", dims({1}), values({2, 3}, {2, 0, 3, 1, 2, 3}).to(DType::F32));
  EXPECT_EQ(g32.dtype(), DType::F32);
  EXPECT_TRUE(same(g32, {0, 6, 0, 6, 3, 2}));
}

TEST(GradReduction, Var) {
  EXPECT_TRUE(checkGrad({.op = "var", .inputs = {f64({3, 4})}}));
  for (double c : {0.0, 1.0, 2.5}) {
    EXPECT_TRUE(checkGrad(
        {.op = "var", .attrs = {{"dims", std::vector<int64_t>{1}}, {"correction", c}}, .inputs = {f64({3, 4})}}));
    EXPECT_TRUE(checkGrad({.op = "var",
                           .attrs = {{"dims", std::vector<int64_t>{0, 2}}, {"correction", c}, {"keepdim", int64_t{1}}},
                           .inputs = {f64({2, 3, 4})}}));
  }
  // N == correction: 2 / 0 = inf times (x - mean), NaN where x equals the mean.
  EXPECT_TRUE(same(gradAt("var", {{"dims", std::vector<int64_t>{1}}, {"correction", 3.0}}, values({1, 3}, {1, 3, 3})),
                   {-kInf, kInf, kInf}));
  EXPECT_TRUE(same(gradAt("var", {{"correction", 2.0}}, values({2}, {1, 1})), {kNaN, kNaN}));
  // N < correction: a negative scale (1.13's var_backward with dims).
  EXPECT_TRUE(same(gradAt("var", {{"dims", std::vector<int64_t>{1}}, {"correction", 4.0}}, values({1, 3}, {1, 3, 3})),
                   {8.0 / 3, -4.0 / 3, -4.0 / 3}));
}

TEST(GradReduction, Cumsum) {
  for (int64_t d : {0, 1, -1}) EXPECT_TRUE(checkGrad({.op = "cumsum", .attrs = {{"dim", d}}, .inputs = {f64({3, 4})}}));
  EXPECT_TRUE(checkGrad({.op = "cumsum", .attrs = {{"dim", int64_t{1}}}, .inputs = {f64({2, 3, 2})}}));
  EXPECT_TRUE(checkGrad({.op = "cumsum", .attrs = {{"dim", int64_t{0}}}, .inputs = {f64({5})}}));
}

TEST(GradReduction, Cumprod) {
  for (int64_t d : {0, 1, -1}) EXPECT_TRUE(checkGrad({.op = "cumprod", .attrs = {{"dim", d}}, .inputs = {f64({3, 4})}}));
  EXPECT_TRUE(checkGrad({.op = "cumprod", .attrs = {{"dim", int64_t{1}}}, .inputs = {f64({2, 3, 2})}}));
  // (Rows with exact zeros, PyTorch's special case, are checked against its
  // autograd in tests/torch/grad_kernels_test.cpp.)
}

}  // namespace
}  // namespace kiln::testing
