// CPU reference kernels of the elementwise family against libtorch: binary
// ops with broadcasting and type promotion, comparisons, logical ops, where,
// cast, unary math and activations with their attributes, special values,
// half types and empty tensors. Inputs are random with fixed seeds.
#include <cmath>
#include <functional>
#include <limits>

#include "tests/torch/torch_compare.h"

namespace kiln::testing {
namespace {

using TorchBinary = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>;
using TorchUnary = std::function<torch::Tensor(const torch::Tensor&)>;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// Run `op` and compare its single output with `expected`.
void check(const std::string& op, const std::vector<torch::Tensor>& inputs, const torch::Tensor& expected,
           const AttrMap& attrs = {}, double tol = 1e-6) {
  auto out = runOp(op, inputs, attrs);
  ASSERT_EQ(out.size(), 1u) << op;
  expectClose(out[0], expected, tol, op);
}

/// The error message of running `op`, or "" when it succeeds.
std::string runOpError(const std::string& op, const std::vector<torch::Tensor>& inputs, const AttrMap& attrs = {}) {
  Graph g;
  std::vector<Value*> ins;
  TensorMap bound;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor t = fromTorch(inputs[i]);
    ins.push_back(g.addInput("input" + std::to_string(i), t.type(), ValueRole::Data));
    bound["input" + std::to_string(i)] = t;
  }
  g.addOutput(g.add(op, ins, attrs), "out");
  auto ex = CpuExecutor::create(g);
  if (!ex.ok()) return ex.error().message;
  auto outs = ex->run(bound);
  return outs.ok() ? "" : outs.error().message;
}

/// f32 values with every special value mixed in.
torch::Tensor withSpecials(torch::Tensor x) {
  auto flat = x.view({-1});
  const double specials[] = {kInf, -kInf, kNaN, 0.0, -0.0, 1e-30, -1e30};
  for (int64_t i = 0; i < 7 && i < flat.numel(); ++i) flat[i * 3 % flat.numel()] = specials[i];
  return x;
}

const std::vector<std::pair<std::string, TorchBinary>>& arithmeticOps() {
  static const std::vector<std::pair<std::string, TorchBinary>> ops = {
      {"add", [](auto& a, auto& b) { return a + b; }},
      {"sub", [](auto& a, auto& b) { return a - b; }},
      {"mul", [](auto& a, auto& b) { return a * b; }},
      {"div", [](auto& a, auto& b) { return torch::div(a, b); }},
      {"floor_div", [](auto& a, auto& b) { return torch::floor_divide(a, b); }},
      {"remainder", [](auto& a, auto& b) { return torch::remainder(a, b); }},
      {"maximum", [](auto& a, auto& b) { return torch::maximum(a, b); }},
      {"minimum", [](auto& a, auto& b) { return torch::minimum(a, b); }},
      {"atan2",
       [](auto& a, auto& b) {
         // libtorch 1.13's CPU atan2 has no half kernel: float, rounded once (Kiln's half compute).
         if (a.scalar_type() != torch::kHalf) return torch::atan2(a, b);
         return torch::atan2(a.to(torch::kFloat32), b.to(torch::kFloat32)).to(torch::kHalf);
       }},
      {"xlogy", [](auto& a, auto& b) { return torch::xlogy(a, b); }},
  };
  return ops;
}

TEST(KernelsElementwiseBinary, ArithmeticBroadcastingF32) {
  torch::manual_seed(1);
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}}, {{2, 1, 4}, {3, 1}}, {{}, {2, 3}},  {{2, 3}, {}}, {{1}, {5, 1}},
      {{4, 1, 3}, {1, 5, 1}}, {{}, {}},         {{0, 3}, {3}},       {{2, 0}, {1}},
  };
  for (auto& [sa, sb] : shapes)
    for (auto& [op, fn] : arithmeticOps()) {
      auto a = torch::randn(sa) * 3, b = torch::randn(sb) * 3;
      check(op, {a, b}, fn(a, b));
    }
}

TEST(KernelsElementwiseBinary, LargeFastPathsAndParallel) {
  torch::manual_seed(2);
  auto a = torch::randn({8, 64, 32, 32}), b = torch::randn({8, 64, 32, 32});
  auto bias = torch::randn({1, 64, 1, 1}), s = torch::randn({});
  check("add", {a, b}, a + b);
  check("mul", {a, bias}, a * bias);
  check("sub", {bias, a}, bias - a);
  check("mul", {a, s}, a * s);
  check("div", {s, a}, s / a);
  // Different ranks, broadcasting inside a parallel walk.
  auto at = a.transpose(1, 3).contiguous(), bt = b[0].transpose(0, 2).contiguous();
  check("maximum", {at, bt}, torch::maximum(at, bt));
}

TEST(KernelsElementwiseBinary, SpecialValuesF32) {
  torch::manual_seed(3);
  auto a = withSpecials(torch::randn({5, 7}) * 4), b = withSpecials(torch::randn({5, 7}).flip(1) * 4);
  for (auto& [op, fn] : arithmeticOps()) check(op, {a, b}, fn(a, b));
  check("pow", {a.abs(), b}, torch::pow(a.abs(), b));
  // Division by zero in floats is IEEE, not an error.
  auto z = torch::zeros({7});
  check("floor_div", {a[0], z}, torch::floor_divide(a[0], z));
  check("remainder", {a[0], z}, torch::remainder(a[0], z));
}

TEST(KernelsElementwiseBinary, IntegerPythonSemantics) {
  // floor division and remainder follow Python for negative operands.
  auto a = torch::tensor({7, -7, 7, -7, 0, 5, -5, 9, -9, 1}, torch::kInt64);
  auto b = torch::tensor({2, 2, -2, -2, 3, -5, 5, 3, 4, -1}, torch::kInt64);
  for (auto dt : {torch::kInt64, torch::kInt32, torch::kInt8}) {
    auto x = a.to(dt), y = b.to(dt);
    check("floor_div", {x, y}, torch::floor_divide(x, y));
    check("remainder", {x, y}, torch::remainder(x, y));
    check("add", {x, y}, x + y);
    check("mul", {x, y}, x * y);
    check("maximum", {x, y}, torch::maximum(x, y));
  }
  // Integer pow, including negative exponents (0 except for bases 1 and -1).
  auto base = torch::tensor({2, -2, 3, 1, -1, 0, 3, -3, 2}, torch::kInt64);
  auto ex = torch::tensor({-1, -2, -3, -2, -3, -1, 4, 3, 10}, torch::kInt64);
  check("pow", {base, ex}, torch::pow(base, ex));
  // Float floor division with negative operands and exact multiples.
  auto fa = torch::tensor({7.5, -7.5, 7.5, -7.5, 6.0, -6.0, 0.3}),
       fb = torch::tensor({2.0, 2.0, -2.0, -2.0, 3.0, 3.0, 0.1});
  check("floor_div", {fa, fb}, torch::floor_divide(fa, fb));
  check("remainder", {fa, fb}, torch::remainder(fa, fb));
}

TEST(KernelsElementwiseBinary, IntegerDivisionByZeroIsAnError) {
  auto a = torch::tensor({4, 5}, torch::kInt64), b = torch::tensor({1, 0}, torch::kInt64);
  EXPECT_NE(runOpError("floor_div", {a, b}).find("division by zero"), std::string::npos);
  EXPECT_NE(runOpError("remainder", {a, b}).find("division by zero"), std::string::npos);
  // True division of integers is float division: x / 0 is inf.
  check("div", {a, b}, torch::div(a, b));
}

TEST(KernelsElementwiseBinary, TypePromotion) {
  torch::manual_seed(4);
  auto f32 = torch::randn({3, 4}) * 5;
  auto f64 = torch::randn({3, 4}, torch::kFloat64);
  auto i64 = torch::randint(-9, 9, {3, 4}, torch::kInt64);
  auto i32 = torch::randint(-9, 9, {4}, torch::kInt32);
  auto i8 = torch::randint(-9, 9, {3, 4}, torch::kInt8);
  auto u8 = torch::randint(0, 9, {3, 4}, torch::kUInt8);
  auto bl = torch::randint(0, 2, {3, 4}).to(torch::kBool);
  auto nz64 = i64.masked_fill(i64 == 0, 3);
  struct Case {
    std::string op;
    torch::Tensor a, b;
  };
  const std::vector<Case> cases = {
      {"add", f32, i64},         {"mul", i64, f32},        {"sub", f32, f64},
      {"add", i32, i64},         {"mul", i8, u8},          {"add", bl, bl},
      {"mul", bl, i32},          {"div", i64, nz64},       {"div", i32, nz64},
      {"div", bl, f32},          {"floor_div", i64, nz64}, {"remainder", f32, nz64},
      {"maximum", i8, f32},      {"minimum", u8, i64},     {"pow", f32.abs(), i64},
      {"xlogy", i32, i64.abs()}, {"xlogy", f32, u8},       {"add", f32.to(torch::kFloat16), f32.to(torch::kBFloat16)},
  };
  for (const Case& c : cases) {
    auto fn = c.op == "pow" ? TorchBinary([](auto& a, auto& b) { return torch::pow(a, b); }) : TorchBinary();
    for (auto& [name, f] : arithmeticOps())
      if (name == c.op) fn = f;
    check(c.op, {c.a, c.b}, fn(c.a, c.b));
  }
}

TEST(KernelsElementwiseBinary, HalfAndDoubleTypes) {
  torch::manual_seed(5);
  for (auto dt : {torch::kFloat64, torch::kFloat16, torch::kBFloat16}) {
    auto a = torch::randn({4, 6}).to(dt), b = torch::randn({6}).to(dt);
    double tol = dt == torch::kFloat64 ? 1e-12 : 1e-2;
    for (auto& [op, fn] : arithmeticOps()) check(op, {a, b}, fn(a, b), {}, tol);
  }
}

TEST(KernelsElementwiseCompare, AllComparisonsWithPromotionAndNaN) {
  torch::manual_seed(6);
  auto a = withSpecials(torch::randint(-3, 3, {4, 5}).to(torch::kFloat32));
  auto b = torch::randint(-3, 3, {5}, torch::kInt64);
  auto i = torch::randint(-3, 3, {4, 1}, torch::kInt32);
  const std::vector<std::pair<std::string, TorchBinary>> ops = {
      {"eq", [](auto& x, auto& y) { return torch::eq(x, y); }},
      {"ne", [](auto& x, auto& y) { return torch::ne(x, y); }},
      {"lt", [](auto& x, auto& y) { return torch::lt(x, y); }},
      {"le", [](auto& x, auto& y) { return torch::le(x, y); }},
      {"gt", [](auto& x, auto& y) { return torch::gt(x, y); }},
      {"ge", [](auto& x, auto& y) { return torch::ge(x, y); }},
  };
  for (auto& [op, fn] : ops) {
    check(op, {a, b}, fn(a, b));
    check(op, {b, i}, fn(b, i));
    check(op, {a, a}, fn(a, a));  // NaN != NaN
    check(op, {a.to(torch::kBFloat16), a}, fn(a.to(torch::kBFloat16), a));
    check(op, {torch::zeros({0, 5}), b}, fn(torch::zeros({0, 5}), b));
  }
  // Large: exercises the parallel walk.
  auto big = torch::randn({300, 400}), row = torch::randn({400});
  check("gt", {big, row}, big > row);
}

TEST(KernelsElementwiseCompare, LogicalOpsOnTruthiness) {
  auto a = torch::tensor({0.0, 1.5, -2.0, 0.0, kNaN, -0.0});
  auto b = torch::tensor({0, 0, 3, 7, 0, 1}, torch::kInt64);
  check("logical_and", {a, b}, torch::logical_and(a, b));
  check("logical_or", {a, b}, torch::logical_or(a, b));
  check("logical_xor", {a, b}, torch::logical_xor(a, b));
  check("logical_xor", {a.view({6, 1}), b}, torch::logical_xor(a.view({6, 1}), b));
  check("logical_not", {a}, torch::logical_not(a));
  check("logical_not", {b.to(torch::kInt8)}, torch::logical_not(b.to(torch::kInt8)));
}

TEST(KernelsElementwiseWhere, BroadcastingAndPromotion) {
  torch::manual_seed(7);
  auto cond = torch::rand({2, 1, 4}) > 0.5;
  auto a = torch::randn({3, 1});
  auto b = torch::tensor(2.5);
  check("where", {cond, a, b}, torch::where(cond, a, b));
  auto bi = torch::randint(-5, 5, {4}, torch::kInt64);
  check("where", {cond, a, bi}, torch::where(cond, a, bi));
  auto ci = torch::randint(-5, 5, {3, 4}, torch::kInt32);
  check("where", {cond, ci, bi}, torch::where(cond, ci, bi));
  check("where", {cond.select(0, 0), a.to(torch::kFloat64), a}, torch::where(cond[0], a.to(torch::kFloat64), a));
  auto empty = torch::zeros({0, 1, 4}, torch::kBool);
  check("where", {empty, a, b}, torch::where(empty, a, b));
}

/// Every floating unary op without attributes, against its torch function.
const std::vector<std::pair<std::string, TorchUnary>>& floatUnaryOps() {
  static const std::vector<std::pair<std::string, TorchUnary>> ops = {
      {"exp", [](auto& x) { return torch::exp(x); }},
      {"log", [](auto& x) { return torch::log(x); }},
      {"log1p", [](auto& x) { return torch::log1p(x); }},
      {"expm1", [](auto& x) { return torch::expm1(x); }},
      {"sqrt", [](auto& x) { return torch::sqrt(x); }},
      {"rsqrt", [](auto& x) { return torch::rsqrt(x); }},
      {"reciprocal", [](auto& x) { return torch::reciprocal(x); }},
      {"sin", [](auto& x) { return torch::sin(x); }},
      {"cos", [](auto& x) { return torch::cos(x); }},
      {"tanh", [](auto& x) { return torch::tanh(x); }},
      {"sigmoid", [](auto& x) { return torch::sigmoid(x); }},
      {"erf", [](auto& x) { return torch::erf(x); }},
      {"floor", [](auto& x) { return torch::floor(x); }},
      {"ceil", [](auto& x) { return torch::ceil(x); }},
      {"round", [](auto& x) { return torch::round(x); }},
      {"silu", [](auto& x) { return torch::silu(x); }},
      {"mish", [](auto& x) { return torch::mish(x); }},
      {"hardswish", [](auto& x) { return torch::hardswish(x); }},
      {"hardsigmoid", [](auto& x) { return torch::hardsigmoid(x); }},
      {"gelu", [](auto& x) { return torch::gelu(x); }},
      {"hardtanh", [](auto& x) { return torch::hardtanh(x); }},
      {"leaky_relu", [](auto& x) { return torch::leaky_relu(x); }},
      {"elu", [](auto& x) { return torch::elu(x); }},
      {"softplus", [](auto& x) { return torch::softplus(x); }},
      {"neg", [](auto& x) { return torch::neg(x); }},
      {"abs", [](auto& x) { return torch::abs(x); }},
      {"relu", [](auto& x) { return torch::relu(x); }},
      {"sign", [](auto& x) { return torch::sign(x); }},
      {"clamp", [](auto& x) { return x.clone(); }},  // defaults: no bounds
  };
  return ops;
}

TEST(KernelsElementwiseUnary, FloatOpsF32WithSpecialValues) {
  torch::manual_seed(8);
  auto x = withSpecials(torch::randn({6, 9}) * 3);
  for (auto& [op, fn] : floatUnaryOps()) check(op, {x}, fn(x));
  // Large inputs: parallel path; logs and roots of positive values.
  auto big = torch::rand({70000}) * 10 + 0.01;
  for (auto& [op, fn] : floatUnaryOps()) check(op, {big}, fn(big));
}

TEST(KernelsElementwiseUnary, F64AndHalfTypes) {
  torch::manual_seed(9);
  auto x = torch::randn({5, 8}, torch::kFloat64) * 2;
  for (auto& [op, fn] : floatUnaryOps()) check(op, {x}, fn(x), {}, 1e-12);
  // Half types compute in float and round once (libtorch 1.13 lacks many f16 CPU kernels,
  // so the reference is the f32 result rounded the same way).
  for (auto dt : {torch::kFloat16, torch::kBFloat16}) {
    auto h = x.to(dt);
    for (const char* op : {"exp", "relu", "sigmoid", "gelu", "tanh", "silu", "hardswish", "abs", "round"})
      for (auto& [name, fn] : floatUnaryOps())
        if (name == op) check(op, {h}, fn(h.to(torch::kFloat32)).to(dt), {}, 1e-2);
  }
  auto b16 = x.to(torch::kBFloat16);
  check("gelu", {b16}, torch::gelu(b16), {}, 1e-2);  // a native bf16 kernel
}

TEST(KernelsElementwiseUnary, Attributes) {
  torch::manual_seed(10);
  auto x = withSpecials(torch::randn({40}) * 4);
  check("gelu", {x}, torch::gelu(x, "tanh"), {{"approximate", std::string("tanh")}});
  check("gelu", {x}, torch::gelu(x, "none"), {{"approximate", std::string("none")}});
  auto big = torch::randn({70001}) * 4;  // the vectorized loop, its tail and the parallel split
  check("gelu", {big}, torch::gelu(big, "tanh"), {{"approximate", std::string("tanh")}});
  check("hardtanh", {x}, torch::hardtanh(x, -2.0, 3.0), {{"min_val", -2.0}, {"max_val", 3.0}});
  check("hardtanh", {x}, torch::hardtanh(x, 0.0, 6.0), {{"min_val", 0.0}, {"max_val", 6.0}});  // relu6
  check("leaky_relu", {x}, torch::leaky_relu(x, 0.2), {{"negative_slope", 0.2}});
  check("elu", {x}, torch::elu(x, 0.5), {{"alpha", 0.5}});
  check("softplus", {x}, torch::softplus(x, 2.0, 5.0), {{"beta", 2.0}, {"threshold", 5.0}});
  check("softplus", {x}, torch::softplus(x, 0.5, 1.0), {{"beta", 0.5}, {"threshold", 1.0}});
  check("clamp", {x}, torch::clamp(x, -1.0, 2.0), {{"min", -1.0}, {"max", 2.0}});
  check("clamp", {x}, torch::clamp_min(x, -0.5), {{"min", -0.5}});
  check("clamp", {x}, torch::clamp_max(x, 0.5), {{"max", 0.5}});
  check("clamp", {x}, torch::clamp(x, 2.0, 1.0), {{"min", 2.0}, {"max", 1.0}});  // min > max gives max
  EXPECT_NE(runOpError("gelu", {x}, {{"approximate", std::string("fast")}}).find("approximate"), std::string::npos);
}

TEST(KernelsElementwiseUnary, IntegerOps) {
  torch::manual_seed(11);
  for (auto dt : {torch::kInt64, torch::kInt32, torch::kInt16, torch::kInt8}) {
    auto x = torch::randint(-20, 20, {3, 7}, dt);
    check("neg", {x}, torch::neg(x));
    check("abs", {x}, torch::abs(x));
    check("relu", {x}, torch::relu(x));
    check("sign", {x}, torch::sign(x));
    check("clamp", {x}, torch::clamp(x, -5, 7), {{"min", -5.0}, {"max", 7.0}});
    check("clamp", {x}, torch::clamp_min(x, 3), {{"min", 3.0}});
  }
  auto u = torch::randint(0, 200, {10}, torch::kUInt8);
  check("abs", {u}, torch::abs(u));
  check("sign", {u}, torch::sign(u));
  check("clamp", {u}, torch::clamp(u, 10, 100), {{"min", 10.0}, {"max", 100.0}});
}

TEST(KernelsElementwiseUnary, RoundHalfToEven) {
  auto x = torch::tensor({0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999, 3.5000001, 1e8 + 0.5});
  check("round", {x}, torch::round(x));
  check("round", {x.to(torch::kFloat64)}, torch::round(x.to(torch::kFloat64)), {}, 0);
}

TEST(KernelsElementwiseCast, Conversions) {
  torch::manual_seed(12);
  auto x = withSpecials(torch::randn({50}) * 100);
  auto finite = torch::randn({50}) * 100;
  auto check_cast = [&](const torch::Tensor& in, torch::ScalarType to) {
    check("cast", {in}, in.to(to), {{"dtype", fromTorchDType(to)}}, 0);
  };
  check_cast(finite, torch::kInt64);  // truncation toward zero
  check_cast(finite, torch::kInt32);
  check_cast(finite.abs().clamp_max(255), torch::kUInt8);
  check_cast(x, torch::kBool);  // NaN is true
  check_cast(x, torch::kFloat64);
  check_cast(x, torch::kFloat16);
  check_cast(x, torch::kBFloat16);
  check_cast(x.to(torch::kBFloat16), torch::kFloat32);
  check_cast(torch::randint(-100, 100, {20}, torch::kInt64), torch::kFloat32);
  check_cast(torch::randint(-100, 100, {20}, torch::kInt64), torch::kInt8);
  check_cast(torch::rand({4, 5}) > 0.5, torch::kFloat32);
  check_cast(torch::rand({4, 5}) > 0.5, torch::kInt64);
  check_cast(torch::zeros({0, 3}), torch::kInt64);
  check_cast(torch::tensor(3.7), torch::kInt64);
}

TEST(KernelsElementwiseUnary, EmptyTensors) {
  auto e = torch::zeros({0, 4});
  for (auto& [op, fn] : floatUnaryOps()) check(op, {e}, fn(e));
  check("add", {e, torch::zeros({4})}, e + torch::zeros({4}));
}

}  // namespace
}  // namespace kiln::testing
