// Finite-difference checks of the elementwise gradient rules (double
// precision), and PyTorch's values at the points where FD cannot decide:
// ties, bounds, zeros, NaN (expected values from torch 1.13 autograd).
#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/cpu_executor.h"
#include "passes/autodiff.h"
#include "tests/passes/grad_check.h"

namespace kiln::testing {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

Tensor values(Shape s, const std::vector<double>& v) {
  Tensor t(DType::F64, std::move(s));
  for (size_t i = 0; i < v.size(); ++i) t.set(static_cast<int64_t>(i), v[i]);
  return t;
}

/// Gradients of sum(op(inputs)) w.r.t. every floating input, at `inputs`.
std::vector<Tensor> gradsAt(const std::string& op, const AttrMap& attrs, const std::vector<Tensor>& inputs) {
  Graph g;
  TensorMap bound;
  std::vector<Value*> ins, wrt;
  for (size_t i = 0; i < inputs.size(); ++i) {
    bool diff = isFloating(inputs[i].dtype());
    ins.push_back(g.addInput("x" + std::to_string(i), inputs[i].type(), diff ? ValueRole::Param : ValueRole::Data));
    if (diff) wrt.push_back(ins.back());
    bound[ins.back()->name()] = inputs[i];
  }
  Value* loss = g.add("sum", {g.create(op, ins, attrs)->output()});
  g.addOutput(loss, "loss", OutputRole::Loss);
  std::vector<Tensor> result(wrt.size());  // undefined where something failed
  auto grads = differentiate(g, loss, wrt);
  if (!grads) return ADD_FAILURE() << grads.error().message, result;
  for (Value* v : *grads) g.addOutput(v, "grad", OutputRole::Gradient);
  auto ex = CpuExecutor::create(g, {.seed = 1, .num_threads = 1});
  if (!ex) return ADD_FAILURE() << ex.error().message, result;
  auto out = ex->run(bound);
  if (!out) return ADD_FAILURE() << out.error().message, result;
  return {out->begin() + 1, out->end()};
}

/// Elementwise equality where NaN equals NaN.
::testing::AssertionResult same(const Tensor& got, const std::vector<double>& want) {
  if (!got.defined()) return ::testing::AssertionFailure() << "no gradient";
  if (got.numel() != static_cast<int64_t>(want.size()))
    return ::testing::AssertionFailure() << "got " << got.numel() << " elements, want " << want.size();
  for (size_t i = 0; i < want.size(); ++i) {
    double a = got.at(static_cast<int64_t>(i)), b = want[i];
    if (!(std::isnan(a) && std::isnan(b)) && !(std::abs(a - b) <= 1e-4))
      return ::testing::AssertionFailure() << "element " << i << ": got " << a << ", want " << b;
  }
  return ::testing::AssertionSuccess();
}

TEST(GradElementwise, BinaryBroadcast) {
  for (const char* op : {"add", "sub", "mul"}) {
    EXPECT_TRUE(checkGrad({.op = op, .inputs = {f64({3, 4}), f64({4})}}));
    EXPECT_TRUE(checkGrad({.op = op, .inputs = {f64({2, 1, 4}), f64({3, 1})}}));
  }
}

TEST(GradElementwise, Div) {
  EXPECT_TRUE(checkGrad({.op = "div", .inputs = {f64({3, 4}), f64({4})}, .kinks = {0}, .kink_margin = 0.4}));
  EXPECT_TRUE(checkGrad({.op = "div", .inputs = {f64({}), f64({2, 3})}, .kinks = {0}, .kink_margin = 0.4}));
}

TEST(GradElementwise, Pow) {
  // Tensor exponent (positive base: the exponent's gradient needs log(a)).
  EXPECT_TRUE(checkGrad({.op = "pow", .inputs = {f64({3, 4}), f64({4})}, .ranges = {{0, {0.3, 2}}}}));
  // 0-d exponent (x ** c) and broadcasting base.
  EXPECT_TRUE(checkGrad({.op = "pow", .inputs = {f64({2, 3}), f64({})}, .ranges = {{0, {0.3, 2}}}}));
  EXPECT_TRUE(checkGrad({.op = "pow", .inputs = {f64({3, 1}), f64({1, 2})}, .ranges = {{0, {0.3, 2}}}}));
  // Integer exponents on negative bases (exponent fixed: its gradient is NaN there).
  EXPECT_TRUE(checkGrad({.op = "pow", .inputs = {f64({4}), f64({4})}, .fixed = {{1, values({4}, {0, 1, 2, 3})}}}));
  // PyTorch: d/da = 0 where b == 0; d/db = 0 where a == 0 and b >= 0; NaN for a < 0.
  auto g = gradsAt("pow", {}, {values({4}, {0, 0, 2, -1}), values({4}, {0, 2, -1, 0.5})});
  EXPECT_TRUE(same(g[0], {0, 0, -0.25, kNaN}));
  EXPECT_TRUE(same(g[1], {0, 0, 0.5 * std::log(2.0), kNaN}));
}

TEST(GradElementwise, MaximumMinimum) {
  for (const char* op : {"maximum", "minimum"}) {
    EXPECT_TRUE(checkGrad({.op = op, .inputs = {f64({3, 4}), f64({4})}}));
    EXPECT_TRUE(checkGrad({.op = op, .inputs = {f64({2, 1, 3}), f64({4, 1})}}));
  }
  // Ties split the gradient; a NaN gives both sides the full gradient.
  auto mx = gradsAt("maximum", {}, {values({4}, {1, 1, 2, kNaN}), values({4}, {1, 2, 1, 1})});
  EXPECT_TRUE(same(mx[0], {0.5, 0, 1, 1}));
  EXPECT_TRUE(same(mx[1], {0.5, 1, 0, 1}));
  auto mn = gradsAt("minimum", {}, {values({4}, {1, 1, 2, kNaN}), values({4}, {1, 2, 1, 1})});
  EXPECT_TRUE(same(mn[0], {0.5, 1, 0, 1}));
  EXPECT_TRUE(same(mn[1], {0.5, 0, 1, 1}));
}

TEST(GradElementwise, Atan2) {
  // Away from the origin (the gradient's pole), broadcasting either way.
  EXPECT_TRUE(checkGrad({.op = "atan2", .inputs = {f64({3, 4}), f64({4})}, .ranges = {{1, {0.5, 2}}}}));
  EXPECT_TRUE(checkGrad({.op = "atan2", .inputs = {f64({}), f64({2, 3})}, .ranges = {{0, {0.5, 2}}}}));
}

TEST(GradElementwise, Xlogy) {
  // y > 0 (log's domain), broadcasting either way.
  EXPECT_TRUE(checkGrad({.op = "xlogy", .inputs = {f64({3, 4}), f64({4})}, .ranges = {{1, {0.5, 2}}}}));
  EXPECT_TRUE(checkGrad({.op = "xlogy", .inputs = {f64({}), f64({2, 3})}, .ranges = {{1, {0.5, 2}}}}));
}

TEST(GradElementwise, Remainder) {
  EXPECT_TRUE(checkGrad(
      {.op = "remainder", .inputs = {f64({3, 4}), f64({4})}, .lo = -3, .hi = 3, .ranges = {{1, {0.6, 1.7}}}}));
  EXPECT_TRUE(checkGrad(
      {.op = "remainder", .inputs = {f64({2, 3}), f64({})}, .lo = -3, .hi = 3, .ranges = {{1, {-1.7, -0.6}}}}));
  auto g = gradsAt("remainder", {}, {values({2}, {5, 3}), values({2}, {2, -2})});
  EXPECT_TRUE(same(g[0], {1, 1}));
  EXPECT_TRUE(same(g[1], {-2, 2}));
}

TEST(GradElementwise, Where) {
  Tensor cond(DType::Bool, {3, 4});
  for (int64_t i = 0; i < cond.numel(); ++i) cond.set(i, (i * 7) % 3 == 0);
  EXPECT_TRUE(checkGrad({.op = "where", .inputs = {cond.type(), f64({3, 4}), f64({4})}, .fixed = {{0, cond}}}));
  EXPECT_TRUE(checkGrad({.op = "where", .inputs = {cond.type(), f64({}), f64({3, 1})}, .fixed = {{0, cond}}}));
}

TEST(GradElementwise, Relu) {
  EXPECT_TRUE(checkGrad({.op = "relu", .inputs = {f64({5, 3})}, .kinks = {0}}));
  EXPECT_TRUE(same(gradsAt("relu", {}, {values({4}, {kNaN, 0, -1, 2})})[0], {1, 0, 0, 1}));
}

TEST(GradElementwise, SmoothUnary) {
  for (const char* op : {"neg", "exp", "expm1", "sin", "cos", "tanh", "sigmoid", "erf", "silu", "mish"})
    EXPECT_TRUE(checkGrad({.op = op, .inputs = {f64({3, 4})}, .lo = -3, .hi = 3}));
  // Positive domains.
  for (const char* op : {"log", "sqrt", "rsqrt"})
    EXPECT_TRUE(checkGrad({.op = op, .inputs = {f64({3, 4})}, .lo = 0.2, .hi = 3}));
  EXPECT_TRUE(checkGrad({.op = "log1p", .inputs = {f64({3, 4})}, .lo = -0.7, .hi = 3}));
  EXPECT_TRUE(checkGrad({.op = "reciprocal", .inputs = {f64({3, 4})}, .kinks = {0}, .kink_margin = 0.3}));
}

TEST(GradElementwise, Abs) {
  EXPECT_TRUE(checkGrad({.op = "abs", .inputs = {f64({3, 4})}, .kinks = {0}}));
  EXPECT_TRUE(same(gradsAt("abs", {}, {values({3}, {0, kNaN, -1})})[0], {0, 0, -1}));
}

TEST(GradElementwise, PiecewiseConstantHaveZeroGradient) {
  EXPECT_TRUE(checkGrad({.op = "sign", .inputs = {f64({3, 4})}, .kinks = {0}}));
  for (const char* op : {"floor", "ceil"})
    EXPECT_TRUE(checkGrad({.op = op, .inputs = {f64({3, 4})}, .kinks = {-2, -1, 0, 1, 2}}));
  EXPECT_TRUE(checkGrad({.op = "round", .inputs = {f64({3, 4})}, .kinks = {-1.5, -0.5, 0.5, 1.5}}));
  EXPECT_TRUE(checkGrad({.op = "floor_div", .inputs = {f64({3, 4}), f64({4})}, .ranges = {{1, {0.6, 1.7}}}}));
}

TEST(GradElementwise, Cast) {
  // f64 -> f32: the gradient passes and comes back as f64 (FD in f32 precision).
  EXPECT_TRUE(
      checkGrad({.op = "cast", .attrs = {{"dtype", DType::F32}}, .inputs = {f64({3, 4})}, .eps = 1e-2, .tol = 1e-4}));
  auto g = gradsAt("cast", {{"dtype", DType::F32}}, {values({2}, {1.5, -2})});
  EXPECT_EQ(g[0].dtype(), DType::F64);
  EXPECT_TRUE(same(g[0], {1, 1}));
  // Through a cast to an integer dtype nothing flows: loss = sum(x + cast(cast(x, i64), f64)).
  Graph gr;
  Value* x = gr.addInput("x", f64({3}), ValueRole::Param);
  Value* xi = gr.add("cast", {gr.add("cast", {x}, {{"dtype", DType::I64}})}, {{"dtype", DType::F64}});
  Value* loss = gr.add("sum", {gr.add("add", {x, xi})});
  gr.addOutput(loss, "loss", OutputRole::Loss);
  EXPECT_TRUE(checkGraphGrad(gr, {{"x", values({3}, {0.25, 1.5, -2.5})}}, {"x"}));
}

TEST(GradElementwise, ClampAndHardtanh) {
  EXPECT_TRUE(checkGrad(
      {.op = "clamp", .attrs = {{"min", -0.5}, {"max", 1.0}}, .inputs = {f64({4, 5})}, .kinks = {-0.5, 1.0}}));
  EXPECT_TRUE(checkGrad({.op = "clamp", .attrs = {{"min", 0.3}}, .inputs = {f64({4, 5})}, .kinks = {0.3}}));
  EXPECT_TRUE(checkGrad({.op = "clamp", .attrs = {{"max", -0.2}}, .inputs = {f64({4, 5})}, .kinks = {-0.2}}));
  EXPECT_TRUE(checkGrad({.op = "hardtanh", .inputs = {f64({4, 5})}, .kinks = {-1, 1}}));
  EXPECT_TRUE(checkGrad(
      {.op = "hardtanh", .attrs = {{"min_val", 0.0}, {"max_val", 1.5}}, .inputs = {f64({4, 5})}, .kinks = {0, 1.5}}));
  // clamp passes the gradient at its bounds, hardtanh does not; neither at
  // NaN (PyTorch's CPU masks; tests/torch/grad_edge_values_test.cpp checks
  // these points against PyTorch itself).
  EXPECT_TRUE(same(gradsAt("clamp", {{"min", -1.0}, {"max", 1.0}}, {values({4}, {-1, 1, 0, kNaN})})[0], {1, 1, 1, 0}));
  EXPECT_TRUE(same(gradsAt("hardtanh", {}, {values({4}, {-1, 1, 0, kNaN})})[0], {0, 0, 1, 0}));
}

TEST(GradElementwise, HardActivations) {
  for (const char* op : {"hardswish", "hardsigmoid"})
    EXPECT_TRUE(checkGrad({.op = op, .inputs = {f64({4, 5})}, .lo = -5, .hi = 5, .kinks = {-3, 3}}));
  EXPECT_TRUE(same(gradsAt("hardswish", {}, {values({5}, {-3, 3, -4, 4, 0.5})})[0], {-0.5, 1, 0, 1, 2.0 / 3}));
  EXPECT_TRUE(same(gradsAt("hardsigmoid", {}, {values({5}, {-3, 3, -4, 4, 0.5})})[0], {0, 0, 0, 0, 1.0 / 6}));
  // Bit for bit: PyTorch's double gradient is float(1/6) = 0.1666666716337204
  // (its kernel's constant is 1.0f / 6.0f in every dtype).
  EXPECT_EQ(gradsAt("hardsigmoid", {}, {values({1}, {0.5})})[0].at(0), 0.1666666716337204);
}

TEST(GradElementwise, Gelu) {
  for (const char* a : {"none", "tanh"})
    EXPECT_TRUE(checkGrad(
        {.op = "gelu", .attrs = {{"approximate", std::string(a)}}, .inputs = {f64({4, 5})}, .lo = -4, .hi = 4}));
}

TEST(GradElementwise, LeakyReluEluSoftplus) {
  EXPECT_TRUE(checkGrad({.op = "leaky_relu", .inputs = {f64({4, 5})}, .kinks = {0}}));
  EXPECT_TRUE(
      checkGrad({.op = "leaky_relu", .attrs = {{"negative_slope", 0.2}}, .inputs = {f64({4, 5})}, .kinks = {0}}));
  EXPECT_TRUE(checkGrad({.op = "elu", .inputs = {f64({4, 5})}, .kinks = {0}}));
  EXPECT_TRUE(checkGrad({.op = "elu", .attrs = {{"alpha", 0.5}}, .inputs = {f64({4, 5})}, .kinks = {0}}));
  EXPECT_TRUE(checkGrad({.op = "softplus", .inputs = {f64({4, 5})}, .lo = -4, .hi = 4}));
  // beta * x above threshold: linear (x > 1.5 here).
  EXPECT_TRUE(checkGrad({.op = "softplus",
                         .attrs = {{"beta", 2.0}, {"threshold", 3.0}},
                         .inputs = {f64({4, 5})},
                         .lo = -3,
                         .hi = 3,
                         .kinks = {1.5}}));
  // At 0: leaky_relu takes the slope, elu alpha; NaN: the slope and NaN (the
  // vectorized loops of PyTorch's CPU kernels; grad_edge_values_test.cpp
  // checks these against PyTorch).
  EXPECT_TRUE(same(gradsAt("leaky_relu", {{"negative_slope", 0.2}}, {values({3}, {0, kNaN, -1})})[0], {0.2, 0.2, 0.2}));
  EXPECT_TRUE(same(gradsAt("elu", {{"alpha", 0.5}}, {values({3}, {0, kNaN, -1})})[0], {0.5, kNaN, 0.5 * std::exp(-1)}));
}

/// A tensor of shape `s` with values spread over [lo, hi) (golden-ratio steps).
Tensor spread(Shape s, double lo = -3, double hi = 3) {
  Tensor t(DType::F64, std::move(s));
  for (int64_t i = 0; i < t.numel(); ++i) {
    double f = static_cast<double>(i + 1) * 0.6180339887498949;
    t.set(i, lo + (hi - lo) * (f - std::floor(f)));
  }
  return t;
}

/// The f32 kernels (vectorized exp, float math) agree with the f64 ones.
TEST(GradElementwise, Float32MatchesFloat64) {
  auto agree = [](const std::string& op, const AttrMap& attrs, const std::vector<Tensor>& in64) {
    std::vector<Tensor> in32;
    for (const Tensor& t : in64) in32.push_back(t.to(DType::F32));
    auto g64 = gradsAt(op, attrs, in64), g32 = gradsAt(op, attrs, in32);
    for (size_t k = 0; k < g64.size(); ++k) {
      ASSERT_TRUE(g64[k].defined() && g32[k].defined()) << op;
      EXPECT_EQ(g32[k].dtype(), DType::F32) << op;
      for (int64_t i = 0; i < g64[k].numel(); ++i)
        EXPECT_NEAR(g32[k].at(i), g64[k].at(i), 2e-5 * std::max(1.0, std::abs(g64[k].at(i))))
            << op << " input " << k << " element " << i;
    }
  };
  for (const char* op : {"abs", "expm1", "sin", "cos", "tanh", "sigmoid", "erf", "silu", "mish", "hardswish",
                         "hardsigmoid", "hardtanh", "leaky_relu", "elu", "softplus"})
    agree(op, {}, {spread({37})});
  for (const char* a : {"none", "tanh"}) agree("gelu", {{"approximate", std::string(a)}}, {spread({37})});
  agree("clamp", {{"min", -1.0}, {"max", 2.0}}, {spread({37})});
  for (const char* op : {"sqrt", "rsqrt", "reciprocal", "log1p"}) agree(op, {}, {spread({37}, 0.2, 3)});
  for (const char* op : {"maximum", "minimum", "mul"}) agree(op, {}, {spread({5, 7}), spread({7}, -2, 2)});
  agree("div", {}, {spread({5, 7}), spread({7}, 0.5, 2)});
  agree("atan2", {}, {spread({5, 7}), spread({7}, 0.5, 2)});
  agree("xlogy", {}, {spread({5, 7}), spread({7}, 0.5, 2)});
  agree("pow", {}, {spread({5, 7}, 0.2, 2), spread({7}, -2, 2)});
}

}  // namespace
}  // namespace kiln::testing
