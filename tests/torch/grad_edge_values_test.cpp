// Gradients at the singular and boundary points, against torch.autograd.
//
// grad_kernels_test.cpp draws its inputs away from kinks and ties; this file
// puts them exactly there, because real models live there: ReLU at 0, clamp
// and hardtanh bounds, ties in max/min and pooling windows, all-masked
// softmax rows, constant rows under a normalization, all-zero vectors under
// a norm (a padded window's keys in cosine attention), every target ignored,
// and +-Inf and NaN inputs. Each case is one Kiln op on fixed values,
// differentiated by Kiln's autodiff on the CPU executor and by PyTorch, in
// float64 and float32: outputs and gradients must have NaN, +Inf and -Inf in
// the same places and the finite values agree within 1e-9 (float64) or 1e-5
// (float32) of the reference's largest magnitude.
//
// The op table is enumerated (EdgeValues.EveryOpWithAGradientRuleHasCases):
// an op with a gradient rule and no case here fails that test by name
// unless it is listed in kNoEdgeCases with the reason.
//
// The ATen functions that importers decompose (norms, std, max with
// indices, normalize, cosine_similarity, atan2, ...) are checked end to end
// through the TorchScript importer in grad_edge_values_aten_test.cpp.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "core/op_table.h"
#include "tests/torch/grad_case.h"

namespace kiln::testing {
namespace {

/// Edge cases: tolerances are the harness's, 1e-9 in float64.
GradCase edge(std::string op, AttrMap attrs, std::vector<Arg> args, TorchFn fn, std::string label) {
  return {std::move(op), std::move(attrs), std::move(args), std::move(fn), std::move(label), 1e-9, 1e-5};
}

/// Zero of either sign, the infinities, NaN and a few ordinary values.
const std::vector<double> kSpecials = {-kInf, -2.5, -1, -0.0, 0.0, 0.5, 2, kInf, kNaN};

/// kSpecials plus the op's own kinks and bounds, and the values just inside them.
Arg at(std::vector<double> points) {
  std::vector<double> v = kSpecials;
  v.insert(v.end(), points.begin(), points.end());
  return fixed(padded(v));
}

// ---- unary activations at their kinks and bounds --------------------------------

std::vector<GradCase> unaryActivationsCases() {
  using F = TorchFn;
  auto u = [](std::string op, AttrMap attrs, std::vector<double> points, F fn, std::string label = "") {
    return edge(op, std::move(attrs), {at(std::move(points))}, std::move(fn), label.empty() ? "kinks" : label);
  };
  return {
      u("relu", {}, {1e-300, -1e-300}, [](const Ts& x) { return torch::relu(x[0]); }),
      u("abs", {}, {1e-300}, [](const Ts& x) { return torch::abs(x[0]); }),
      u("neg", {}, {}, [](const Ts& x) { return -x[0]; }),
      u("leaky_relu", {}, {1e-300}, [](const Ts& x) { return torch::leaky_relu(x[0]); }),
      u(
          "leaky_relu", {{"negative_slope", 0.2}}, {1e-300}, [](const Ts& x) { return torch::leaky_relu(x[0], 0.2); },
          "slope 0.2"),
      u("elu", {}, {1e-300, -1e-300}, [](const Ts& x) { return torch::elu(x[0]); }),
      u(
          "elu", {{"alpha", 1.5}}, {}, [](const Ts& x) { return torch::elu(x[0], 1.5); }, "alpha 1.5"),
      u("hardtanh", {}, {-1.0, 1.0, -0.999, 0.999}, [](const Ts& x) { return torch::hardtanh(x[0]); }),
      u(
          "hardtanh", {{"min_val", 0.0}, {"max_val", 6.0}}, {6.0, 5.999, 6.001},
          [](const Ts& x) { return torch::hardtanh(x[0], 0, 6); }, "relu6"),
      u(
          "clamp", {{"min", -1.0}, {"max", 0.5}}, {-1.0, 0.5},
          [](const Ts& x) { return torch::clamp(x[0], -1.0, 0.5); }, "min and max"),
      u(
          "clamp", {{"min", 0.5}}, {0.5}, [](const Ts& x) { return torch::clamp_min(x[0], 0.5); }, "min only"),
      u(
          "clamp", {{"max", -1.0}}, {-1.0}, [](const Ts& x) { return torch::clamp_max(x[0], -1.0); }, "max only"),
      u(
          "clamp", {{"min", 1.0}, {"max", -1.0}}, {1.0, -1.0},
          [](const Ts& x) { return torch::clamp(x[0], 1.0, -1.0); }, "min above max"),
      u("hardswish", {}, {-3.0, 3.0, -2.999, 2.999}, [](const Ts& x) { return torch::hardswish(x[0]); }),
      u("hardsigmoid", {}, {-3.0, 3.0, -2.999, 2.999}, [](const Ts& x) { return torch::hardsigmoid(x[0]); }),
      u("softplus", {}, {20.0, 19.999, -800.0}, [](const Ts& x) { return torch::softplus(x[0]); }),
      u(
          "softplus", {{"beta", 2.0}, {"threshold", 3.0}}, {1.5, 1.4999},
          [](const Ts& x) { return torch::softplus(x[0], 2.0, 3.0); }, "beta 2, threshold 3 (x beta = 3)"),
      u(
          "gelu", {}, {-800.0, 800.0}, [](const Ts& x) { return torch::gelu(x[0]); }, "erf"),
      u(
          "gelu", {{"approximate", S("tanh")}}, {-800.0, 800.0}, [](const Ts& x) { return torch::gelu(x[0], "tanh"); },
          "tanh"),
      u("silu", {}, {-800.0, 800.0}, [](const Ts& x) { return torch::silu(x[0]); }),
      u("mish", {}, {-800.0, 800.0}, [](const Ts& x) { return torch::mish(x[0]); }),
      u("sigmoid", {}, {-800.0, 800.0}, [](const Ts& x) { return torch::sigmoid(x[0]); }),
      u("tanh", {}, {-800.0, 800.0}, [](const Ts& x) { return torch::tanh(x[0]); }),
      u("erf", {}, {-800.0, 800.0}, [](const Ts& x) { return torch::erf(x[0]); }),
  };
}

TEST(EdgeValues, UnaryActivations) {
  checkAll(unaryActivationsCases());
}

// ---- unary math at its poles and domain bounds -----------------------------------

std::vector<GradCase> unaryMathCases() {
  auto u = [](std::string op, std::vector<double> points, TorchFn fn) {
    return edge(op, {}, {at(std::move(points))}, std::move(fn), "poles and domain");
  };
  return {
      u("exp", {-800.0, 800.0}, [](const Ts& x) { return torch::exp(x[0]); }),
      u("log", {1.0}, [](const Ts& x) { return torch::log(x[0]); }),
      u("log1p", {-1.0, -0.999}, [](const Ts& x) { return torch::log1p(x[0]); }),
      u("expm1", {1e-10, -1e-10, -800.0, 800.0}, [](const Ts& x) { return torch::expm1(x[0]); }),
      u("sqrt", {1e-300}, [](const Ts& x) { return torch::sqrt(x[0]); }),
      u("rsqrt", {1e-300}, [](const Ts& x) { return torch::rsqrt(x[0]); }),
      u("reciprocal", {1e-300}, [](const Ts& x) { return torch::reciprocal(x[0]); }),
      u("sin", {}, [](const Ts& x) { return torch::sin(x[0]); }),
      u("cos", {}, [](const Ts& x) { return torch::cos(x[0]); }),
      edge(
          "cast", {{"dtype", DType::F32}}, {at({1e300, -1e300, 1e-300})},
          [](const Ts& x) { return x[0].to(torch::kFloat32); }, "out of float's range"),
  };
}

TEST(EdgeValues, UnaryMath) {
  checkAll(unaryMathCases());
}

// ---- binary ops: zeros, infinities, NaN, ties ------------------------------------

/// Every pair of two value lists, as two [n*m] tensors.
std::pair<torch::Tensor, torch::Tensor> pairs(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> x, y;
  for (double u : a)
    for (double v : b) x.push_back(u), y.push_back(v);
  return {vals(x), vals(y)};
}

std::vector<GradCase> binaryCases() {
  const std::vector<double> some = {-kInf, -2, -0.0, 0.0, 0.5, 2, kInf, kNaN};
  auto [a, b] = pairs(some, some);
  auto bin = [&](std::string op, TorchFn fn, torch::Tensor x = {}, torch::Tensor y = {}, std::string label = "") {
    return edge(op, {}, {fixed(x.defined() ? x : a), fixed(y.defined() ? y : b)}, std::move(fn),
                label.empty() ? "all pairs of specials" : label);
  };
  // pow's own points: 0 ** (positive, zero, negative, fractional), negative
  // bases with fractional exponents, 1 ** inf, NaN ** 0.
  auto [pa, pb] = pairs({-2, -1, -0.0, 0.0, 0.5, 1, 2, kInf, -kInf, kNaN}, {-1, -0.5, 0.0, 0.5, 1, 2, 3, kInf, kNaN});
  // maximum/minimum ties (gradient halved) and NaN.
  torch::Tensor ta = vals({1, 2, -0.0, 0.0, kNaN, 3, kInf}), tb = vals({1, 2, 0.0, -0.0, 1, kNaN, kInf});
  return {
      bin("add", [](const Ts& x) { return x[0] + x[1]; }),
      bin("sub", [](const Ts& x) { return x[0] - x[1]; }),
      bin("mul", [](const Ts& x) { return x[0] * x[1]; }),
      bin("div", [](const Ts& x) { return x[0] / x[1]; }),
      bin("remainder", [](const Ts& x) { return torch::remainder(x[0], x[1]); }),
      bin("maximum", [](const Ts& x) { return torch::maximum(x[0], x[1]); }),
      bin("minimum", [](const Ts& x) { return torch::minimum(x[0], x[1]); }),
      // atan2 at the origin (either zero's sign: the angle's branch cut) and
      // at infinities on either side.
      bin("atan2", [](const Ts& x) { return torch::atan2(x[0], x[1]); }),
      // xlogy at x = 0 (log(y)'s gradient kept unless y <= 0), y = 0, +-inf, NaN.
      bin("xlogy", [](const Ts& x) { return torch::xlogy(x[0], x[1]); }),
      bin(
          "maximum", [](const Ts& x) { return torch::maximum(x[0], x[1]); }, ta, tb, "ties"),
      bin(
          "minimum", [](const Ts& x) { return torch::minimum(x[0], x[1]); }, ta, tb, "ties"),
      bin(
          "pow", [](const Ts& x) { return torch::pow(x[0], x[1]); }, pa, pb, "zero and negative bases"),
      edge(
          "pow", {}, {fixed(vals({-2, -0.0, 0.0, 0.5, 2, kInf, kNaN})), fixed(vals({0.0}).reshape({}))},
          [](const Ts& x) { return torch::pow(x[0], x[1]); }, "0-d exponent 0"),
      edge(
          "where", {},
          {fixed(torch::tensor({true, false, true, false, true, false})),
           fixed(vals({kInf, kInf, kNaN, kNaN, 0, -kInf})), fixed(vals({kNaN, 1, kInf, 2, -kInf, kNaN}))},
          [](const Ts& x) { return torch::where(x[0], x[1], x[2]); }, "specials in the unselected branch"),
  };
}

TEST(EdgeValues, Binary) {
  checkAll(binaryCases());
}

// ---- reductions: ties, NaN, zeros, constant rows, empty ---------------------------

std::vector<GradCase> reductionsCases() {
  // Rows: ties, a NaN, +inf twice, -inf only, ordinary.
  const torch::Tensor rows = vals({3, 1,    3, 2,  //
                                   1, kNaN, 5, 2, kInf, 0, kInf, 1, -kInf, -kInf, -kInf, -kInf, 0.5, -1, 2, 1.5},
                                  {5, 4});
  auto red = [&](std::string op, AttrMap attrs, TorchFn fn, std::string label, torch::Tensor x = {}) {
    return edge(op, std::move(attrs), {fixed(x.defined() ? x : rows)}, std::move(fn), label);
  };
  const AttrMap dim1{{"dims", Ints{1}}};
  const AttrMap dim1keep{{"dims", Ints{1}}, {"keepdim", I{1}}};
  // A row of one value, a row with zero variance, a row with an infinity.
  const torch::Tensor var_rows = vals({2, 2, 2, 2, -0.0, 0.0, 0.0, -0.0, 1, kInf, 2, 3, 1, 2, 3, 4}, {4, 4});
  const torch::Tensor zeros = vals({0, 2, 3, 0, 0, 4, 1, 1, 5, kInf, 0, 2, kNaN, 1, 0, 2}, {4, 4});
  return {
      red(
          "sum", dim1, [](const Ts& x) { return x[0].sum(1); }, "specials"),
      red(
          "mean", dim1, [](const Ts& x) { return x[0].mean(1); }, "specials"),
      red(
          "mean", dim1, [](const Ts& x) { return x[0].mean(1); }, "empty rows", torch::zeros({3, 0}, torch::kFloat64)),
      red(
          "sum", {}, [](const Ts& x) { return x[0].sum(); }, "empty", torch::zeros({0, 3}, torch::kFloat64)),
      red(
          "amax", dim1, [](const Ts& x) { return torch::amax(x[0], {1}); }, "ties, NaN, infinities"),
      red(
          "amin", dim1keep, [](const Ts& x) { return torch::amin(x[0], {1}, true); }, "ties, NaN, infinities"),
      red(
          "amax", {}, [](const Ts& x) { return torch::amax(x[0], Ints{}); }, "all, NaN"),
      red(
          "prod", dim1, [](const Ts& x) { return x[0].prod(1); }, "zeros, inf, NaN", zeros),
      red(
          "prod", {}, [](const Ts& x) { return x[0].prod(); }, "all, zeros", zeros.slice(0, 0, 2)),
      red(
          "var", dim1, [](const Ts& x) { return torch::var(x[0], Ints{1}, c10::optional<int64_t>(1), false); },
          "constant rows, inf", var_rows),
      red(
          "var", {{"dims", Ints{1}}, {"correction", 0.0}},
          [](const Ts& x) { return torch::var(x[0], Ints{1}, c10::optional<int64_t>(0), false); },
          "constant rows, correction 0", var_rows),
      red(
          "var", dim1, [](const Ts& x) { return torch::var(x[0], Ints{1}, c10::optional<int64_t>(1), false); },
          "one element, correction 1", vals({1.5, -2, 0}, {3, 1})),
      red(
          "cumsum", {{"dim", I{1}}}, [](const Ts& x) { return torch::cumsum(x[0], 1); }, "specials"),
      red(
          "cumprod", {{"dim", I{1}}}, [](const Ts& x) { return torch::cumprod(x[0], 1); }, "zeros, inf, NaN", zeros),
  };
}

TEST(EdgeValues, Reductions) {
  checkAll(reductionsCases());
}

// ---- softmax and the normalizations: masked rows, constant rows ----------------

std::vector<GradCase> softmaxAndNormsCases() {
  // Rows: all -inf (fully masked), partly -inf, a +inf, a NaN, ordinary.
  const torch::Tensor logits =
      vals({-kInf, -kInf, -kInf, -kInf, 0.5, -kInf, 1, -kInf, 1, kInf, 0, 2, 1, kNaN, 0, 2, 3, 3, 3, 3}, {5, 4});
  // A constant row (zero variance), a row of zeros, a row with an infinity.
  const torch::Tensor rows = vals({1.5, 1.5, 1.5, 1.5, 0, 0, 0, 0, 1, kInf, 2, 0, -1, 2, 0.5, 3}, {4, 4});
  auto bn = [](bool training) {
    return
        [training](const Ts& x) { return torch::batch_norm(x[0], x[1], x[2], x[3], x[4], training, 0.1, 1e-5, false); };
  };
  // Channel 0 constant (zero batch variance), channel 1 ordinary, channel 2 all zeros.
  const torch::Tensor bn_x =
      vals({2, 0.5, 0, 2, -1, 0, 2, 1.5, 0, 2, 3, 0, 2, 0.25, 0, 2, 1, 0, 2, -2, 0, 2, 0.75, 0}, {8, 3});
  auto bnArgs = [&] {
    return std::vector<Arg>{fixed(bn_x), fixed(vals({1.5, 0.5, 2})), fixed(vals({0.1, -0.2, 0.3})),
                            fixedData(vals({0, 0.5, 0})), fixedData(vals({1, 2, 0}))};
  };
  return {
      edge(
          "softmax", {{"dim", I{1}}}, {fixed(logits)}, [](const Ts& x) { return torch::softmax(x[0], 1); },
          "masked rows, inf, NaN"),
      edge(
          "log_softmax", {{"dim", I{1}}}, {fixed(logits)}, [](const Ts& x) { return torch::log_softmax(x[0], 1); },
          "masked rows, inf, NaN"),
      edge(
          "layer_norm", {{"normalized_shape", Ints{4}}},
          {fixed(rows), fixed(vals({1, 0.5, 2, -1})), fixed(vals({0, 0.1, -0.1, 0.2}))},
          [](const Ts& x) { return torch::layer_norm(x[0], {4}, x[1], x[2], 1e-5); }, "constant rows, inf"),
      edge(
          "group_norm", {{"num_groups", I{2}}},
          {fixed(rows.reshape({2, 4, 2})), fixed(vals({1, 0.5, 2, -1})), fixed(vals({0, 0.1, -0.1, 0.2}))},
          [](const Ts& x) { return torch::group_norm(x[0], 2, x[1], x[2], 1e-5); }, "constant groups, inf"),
      edge("batch_norm", {{"training", I{1}}}, bnArgs(), bn(true), "training, constant channels"),
      edge("batch_norm", {{"training", I{0}}}, bnArgs(), bn(false), "eval, zero running variance"),
  };
}

TEST(EdgeValues, SoftmaxAndNorms) {
  checkAll(softmaxAndNormsCases());
}

// ---- losses: ignored targets, masked classes ---------------------------------------

std::vector<GradCase> lossesCases() {
  using at::Reduction::Mean, at::Reduction::Sum;
  auto ce = [](int64_t reduction, int64_t ignore = -100, double smoothing = 0) {
    return [=](const Ts& x) { return at::cross_entropy_loss(x[0], x[1], {}, reduction, ignore, smoothing); };
  };
  auto nll = [](int64_t reduction) {
    return [=](const Ts& x) { return at::nll_loss_nd(x[0], x[1], {}, reduction, -100); };
  };
  auto r = [](const char* reduction, double smoothing = 0) {
    return AttrMap{{"reduction", S(reduction)}, {"label_smoothing", smoothing}};
  };
  const torch::Tensor logits = vals({1, 2, 0.5, -1, 0, 0, 0, 0, 3, -1, 2, 1}, {3, 4});
  const Arg all_ignored = fixed(torch::tensor({-100, -100, -100}, torch::kInt64));
  // A masked class (-inf logit) that is not the target, and one that is.
  const torch::Tensor masked = vals({1, -kInf, 0.5, -1, -kInf, -kInf, 2, 0, 3, -1, -kInf, 1}, {3, 4});
  const Arg masked_targets = fixed(torch::tensor({0, 2, 2}, torch::kInt64));
  return {
      edge("cross_entropy", r("mean"), {fixed(logits), all_ignored}, ce(Mean), "mean, every target ignored"),
      edge("cross_entropy", r("sum"), {fixed(logits), all_ignored}, ce(Sum), "sum, every target ignored"),
      edge("cross_entropy", r("mean", 0.1), {fixed(logits), all_ignored}, ce(Mean, -100, 0.1),
           "mean, label smoothing, every target ignored"),
      edge("cross_entropy", r("mean"), {fixed(masked), masked_targets}, ce(Mean), "-inf logits, one on a target"),
      edge("cross_entropy", r("mean"), {fixed(masked), fixed(torch::tensor({0, 2, 3}, torch::kInt64))}, ce(Mean),
           "-inf logits off the targets"),
      edge("cross_entropy", r("mean", 0.1), {fixed(masked), fixed(torch::tensor({0, 2, 3}, torch::kInt64))},
           ce(Mean, -100, 0.1), "-inf logits, label smoothing"),
      edge("nll_loss", r("mean"), {fixed(logits), all_ignored}, nll(Mean), "mean, every target ignored"),
      edge("nll_loss", r("mean"), {fixed(masked), masked_targets}, nll(Mean), "-inf log-probabilities"),
      edge(
          "mse_loss", r("mean"), {fixed(vals({0, kInf, kNaN, 1, -kInf})), fixed(vals({0, kInf, 1, kNaN, 2}))},
          [](const Ts& x) { return at::mse_loss(x[0], x[1], Mean); }, "specials"),
  };
}

TEST(EdgeValues, Losses) {
  checkAll(lossesCases());
}

// ---- matrix products with infinities and NaN --------------------------------------

std::vector<GradCase> matrixProductsCases() {
  // inf * 0 is NaN in every product that meets it; a NaN spreads along its row/column.
  const torch::Tensor a = vals({1, 0, 2, kInf, 1, 0, 0, 0, 0, kNaN, 1, 1}, {3, 4});
  const torch::Tensor b = vals({0, 1, 2, 1, -1, 0, 0, 0, 0, 3, 1, 0.5}, {4, 3});
  const torch::Tensor w = vals({0, 1, 2, 1, -1, 0, 0, 0, 0, 3, 1, 0.5, 0, 0, 0, 0}, {4, 4});
  return {
      edge(
          "matmul", {}, {fixed(a), fixed(b)}, [](const Ts& x) { return torch::matmul(x[0], x[1]); },
          "inf and NaN operands"),
      edge(
          "gemm", {{"trans_b", I{1}}}, {fixed(a), fixed(b.t().contiguous())},
          [](const Ts& x) { return torch::matmul(x[0], x[1].t()); }, "inf and NaN operands, b transposed"),
      edge(
          "linear", {}, {fixed(a), fixed(w), fixed(vals({0, kInf, 1, -1}))},
          [](const Ts& x) { return torch::linear(x[0], x[1], x[2]); }, "inf and NaN operands, inf bias"),
  };
}

TEST(EdgeValues, MatrixProducts) {
  checkAll(matrixProductsCases());
}

// ---- convolution, pooling, embedding, dropout -------------------------------------

std::vector<GradCase> convPoolEmbeddingCases() {
  // One image, one channel: a plateau of equal values (ties in every
  // window), a NaN, an inf and a -inf region.
  const torch::Tensor img = vals({1,     1,     1, 1, 2,     //
                                  1,     1,     1, 1, 2,     //
                                  0,     kNaN,  0, 3, 3,     //
                                  -kInf, -kInf, 0, 3, kInf,  //
                                  -kInf, -kInf, 5, 5, 5},
                                 {1, 1, 5, 5});
  const torch::Tensor ties = torch::ones({1, 2, 4, 4}, torch::kFloat64);
  auto mp = [](Ints k, Ints s, Ints p) { return AttrMap{{"kernel_size", k}, {"stride", s}, {"padding", p}}; };
  const torch::Tensor weight = vals({1, 0, 0, -1, 0.5, 0, 2, 0, 1}, {1, 1, 3, 3});
  const AttrMap conv{{"stride", Ints{1, 1}}, {"padding", Ints{1, 1}}, {"dilation", Ints{1, 1}}, {"groups", I{1}}};
  return {
      edge(
          "max_pool2d", mp({2, 2}, {1, 1}, {0, 0}), {fixed(img)},
          [](const Ts& x) {
            return torch::max_pool2d(x[0], {2, 2}, {1, 1});
          },
          "ties, NaN, infinities"),
      edge(
          "max_pool2d", mp({3, 3}, {2, 2}, {1, 1}), {fixed(ties)},
          [](const Ts& x) {
            return torch::max_pool2d(x[0], {3, 3}, {2, 2}, {1, 1});
          },
          "all ties, padding"),
      edge(
          "adaptive_max_pool2d", {{"output_size", Ints{2, 2}}}, {fixed(img)},
          [](const Ts& x) {
            return std::get<0>(torch::adaptive_max_pool2d(x[0], {2, 2}));
          },
          "ties, NaN, infinities"),
      edge(
          "adaptive_max_pool2d", {{"output_size", Ints{3, 3}}}, {fixed(ties)},
          [](const Ts& x) {
            return std::get<0>(torch::adaptive_max_pool2d(x[0], {3, 3}));
          },
          "all ties"),
      edge(
          "avg_pool2d", mp({2, 2}, {1, 1}, {0, 0}), {fixed(img)},
          [](const Ts& x) {
            return torch::avg_pool2d(x[0], {2, 2}, {1, 1});
          },
          "NaN, infinities"),
      edge(
          "adaptive_avg_pool2d", {{"output_size", Ints{2, 2}}}, {fixed(img)},
          [](const Ts& x) {
            return torch::adaptive_avg_pool2d(x[0], {2, 2});
          },
          "NaN, infinities"),
      edge(
          "conv2d", conv, {fixed(img), fixed(weight)}, [](const Ts& x) { return torch::conv2d(x[0], x[1], {}, 1, 1); },
          "NaN, infinities, zero weights"),
      edge(
          "conv2d_input_backward",
          {{"input_shape", Ints{1, 1, 5, 5}},
           {"stride", Ints{1, 1}},
           {"padding", Ints{1, 1}},
           {"dilation", Ints{1, 1}},
           {"groups", I{1}}},
          {fixed(img), fixed(weight)}, [](const Ts& x) { return torch::conv_transpose2d(x[0], x[1], {}, 1, 1); },
          "NaN, infinities"),
      edge(
          "embedding", {{"padding_idx", I{1}}, {"scale_grad_by_freq", I{1}}},
          {fixed(vals({kInf, 1, kNaN, 0, 2, -1}, {3, 2})), fixed(torch::tensor({1, 1, 0, 2, 0}, torch::kInt64))},
          [](const Ts& x) { return torch::embedding(x[0], x[1], 1, true); }, "specials, padding row"),
  };
}

TEST(EdgeValues, ConvPoolEmbedding) {
  checkAll(convPoolEmbeddingCases());
}

/// Dropout at p = 0 keeps everything and at p = 1 drops everything; a value
/// is multiplied by its factor, so a dropped inf or NaN is NaN (PyTorch's
/// x * noise, which at p = 1 is x * 0). At p = 0.5 PyTorch's side takes
/// Kiln's keep-mask (the node's second output), as GradKernelsNN.Dropout.
TEST(EdgeValues, DropoutAtItsBounds) {
  torch::manual_seed(3);
  for (torch::ScalarType dtype : {torch::kFloat64, torch::kFloat32}) {
    for (double p : {0.0, 1.0, 0.5}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " p=" + std::to_string(p));
      const Ts x = {padded({1, -2, kInf, kNaN, 0, 3, -kInf, -0.0}).to(dtype)};
      Ts w = {uniform({64}, -1, 1).to(dtype)};
      GradCase c = edge(
          "dropout", {{"p", p}, {"training", I{1}}}, {fixed(x[0])}, [](const Ts& v) { return v[0]; }, "");
      Sides got = kilnSide(c, x, w);
      if (got.outputs.empty()) continue;
      const torch::Tensor keep = got.outputs[1].to(dtype);
      c.torch = [keep, p](const Ts& v) { return p == 1 ? v[0] * 0 : v[0] * (keep / (1 - p)); };
      Sides want = torchSide(c, x, w);
      compareSides(got, want, dtype == torch::kFloat64 ? 1e-9 : 1e-5, "dropout", x);
    }
  }
}

// ---- attention: fully masked rows --------------------------------------------------

std::vector<GradCase> attentionMaskedRowsCases() {
  // q, k, v of [1, 1, 3, 2]; row 1 of the keep-mask keeps nothing. PyTorch's
  // reference is the chain fuse_attention replaces: softmax(q k^T * s masked) v.
  const torch::Tensor q = vals({1, 0, 0.5, -1, 2, 1}, {1, 1, 3, 2});
  const torch::Tensor k = vals({0, 1, 1, 1, -1, 0.5}, {1, 1, 3, 2});
  const torch::Tensor v = vals({1, 2, 3, 4, 5, 6}, {1, 1, 3, 2});
  const torch::Tensor keep = torch::tensor({true, true, false, false, false, false, true, false, true}).reshape({3, 3});
  return {
      edge(
          "attention", {{"scale", 0.5}, {"mask", S("keep")}}, {fixed(q), fixed(k), fixed(v), fixed(keep)},
          [](const Ts& x) {
            torch::Tensor s = torch::matmul(x[0], x[1].transpose(-2, -1)) * 0.5;
            s = s.masked_fill(x[3].logical_not(), -kInf);
            return torch::matmul(torch::softmax(s, -1), x[2]);
          },
          "a fully masked row"),
  };
}

TEST(EdgeValues, AttentionMaskedRows) {
  checkAll(attentionMaskedRowsCases());
}

// ---- layout and indexing ops pass specials through ---------------------------------

std::vector<GradCase> shapeAndIndexingCases() {
  const torch::Tensor x = vals({kInf, -kInf, kNaN, -0.0, 0.0, 1, 2, 3, 4, 5, 6, 7}, {3, 4});
  auto sh = [&](std::string op, AttrMap attrs, TorchFn fn, std::vector<Arg> more = {}) {
    std::vector<Arg> args{fixed(x)};
    args.insert(args.end(), more.begin(), more.end());
    return edge(op, std::move(attrs), std::move(args), std::move(fn), "specials");
  };
  const torch::Tensor idx = torch::tensor({2, 0, 2, 1}, torch::kInt64);
  const torch::Tensor gidx = torch::tensor({{0, 0, 3}, {1, 1, 1}, {3, 2, 3}}, torch::kInt64);
  const torch::Tensor sr_src = vals({kNaN, 5, 5, -kInf, 0, -0.0}, {1, 6}).expand({3, 6}).contiguous();
  const torch::Tensor sr_idx = torch::tensor({0, 0, 1, 1, 2, 2}, torch::kInt64).expand({3, 6}).contiguous();
  auto sr = [&](const char* reduce, bool self) {
    const std::string r = reduce;
    return edge(
        "scatter_reduce", {{"dim", I{1}}, {"reduce", r}, {"include_self", I{self}}},
        {fixed(x), fixed(sr_idx), fixed(sr_src)},
        [r, self](const Ts& v) { return torch::scatter_reduce(v[0], 1, v[1], v[2], r, self); },
        r + (self ? " with self" : "") + ": NaN, ties, signed zeros");
  };
  return {
      sh("reshape", {{"shape", Ints{2, 6}}},
         [](const Ts& v) {
           return v[0].reshape({2, 6});
         }),
      sh("permute", {{"dims", Ints{1, 0}}},
         [](const Ts& v) {
           return v[0].permute({1, 0});
         }),
      sh("expand", {{"shape", Ints{2, 3, 4}}},
         [](const Ts& v) {
           return v[0].expand({2, 3, 4});
         }),
      sh("slice", {{"dim", I{1}}, {"start", I{1}}, {"end", I{4}}, {"step", I{2}}},
         [](const Ts& v) { return v[0].slice(1, 1, 4, 2); }),
      sh("select", {{"dim", I{0}}, {"index", I{0}}}, [](const Ts& v) { return v[0].select(0, 0); }),
      sh("cat", {{"dim", I{0}}},
         [](const Ts& v) {
           return torch::cat({v[0], v[1]}, 0);
         },
         {fixed(vals({kNaN, 1, -kInf, 0}, {1, 4}))}),
      sh("split", {{"dim", I{1}}, {"sizes", Ints{1, 3}}},
         [](const Ts& v) {
           return torch::split_with_sizes(v[0], {1, 3}, 1);
         }),
      sh("roll", {{"shifts", Ints{1}}, {"dims", Ints{1}}}, [](const Ts& v) { return torch::roll(v[0], {1}, {1}); }),
      sh("flip", {{"dims", Ints{0}}}, [](const Ts& v) { return torch::flip(v[0], {0}); }),
      sh("repeat", {{"repeats", Ints{1, 2}}},
         [](const Ts& v) {
           return v[0].repeat({1, 2});
         }),
      sh("triu", {{"diagonal", I{0}}}, [](const Ts& v) { return torch::triu(v[0]); }),
      sh("tril", {{"diagonal", I{0}}}, [](const Ts& v) { return torch::tril(v[0]); }),
      sh("pad", {{"pads", Ints{1, 2}}, {"mode", S("reflect")}},
         [](const Ts& v) {
           return at::pad(v[0], {1, 2}, "reflect");
         }),
      sh("pad", {{"pads", Ints{1, 1}}, {"mode", S("constant")}, {"value", kInf}},
         [](const Ts& v) {
           return at::pad(v[0], {1, 1}, "constant", kInf);
         }),
      sh("index", {{"dim", I{1}}}, [](const Ts& v) { return v[0].index_select(1, v[1]); }, {fixed(idx)}),
      sh("gather", {{"dim", I{1}}}, [](const Ts& v) { return torch::gather(v[0], 1, v[1]); }, {fixed(gidx)}),
      sh("index_add", {{"dim", I{0}}}, [](const Ts& v) { return torch::index_add(v[0], 0, v[1], v[2]); },
         {fixed(torch::tensor({0, 0, 2}, torch::kInt64)),
          fixed(vals({kNaN, 1, 2, kInf, 0, 0, -kInf, 1, 1, 1, 1, 1}, {3, 4}))}),
      sh("scatter_add", {{"dim", I{1}}}, [](const Ts& v) { return torch::scatter_add(v[0], 1, v[1], v[2]); },
         {fixed(gidx), fixed(vals({kInf, -kInf, 1, 0, kNaN, 2, 1, 1, 1}, {3, 3}))}),
      sr("amax", true),
      sr("amax", false),
      sr("amin", false),
      sr("prod", true),
      edge(
          "slice_backward",
          {{"input_shape", Ints{3, 6}}, {"dim", I{1}}, {"start", I{1}}, {"end", I{5}}, {"step", I{1}}}, {fixed(x)},
          [](const Ts& v) {
            return torch::slice_backward(v[0], {3, 6}, 1, 1, 5, 1);
          },
          "specials"),
      edge(
          "select_backward", {{"input_shape", Ints{3, 4, 2}}, {"dim", I{2}}, {"index", I{1}}}, {fixed(x)},
          [](const Ts& v) {
            return torch::select_backward(v[0], {3, 4, 2}, 2, 1);
          },
          "specials"),
      edge(
          "pad_backward", {{"input_shape", Ints{3, 2}}, {"pads", Ints{1, 1}}, {"mode", S("reflect")}}, {fixed(x)},
          [](const Ts& v) {
            torch::Tensor probe = torch::zeros({3, 2}, v[0].options().requires_grad(true));
            return torch::autograd::grad({at::pad(probe, {1, 1}, "reflect")}, {probe}, {v[0]}, true, true)[0];
          },
          "specials"),
  };
}

TEST(EdgeValues, ShapeAndIndexing) {
  checkAll(shapeAndIndexingCases());
}

// ---- every op with a gradient rule has edge cases ----------------------------------

/// Ops with a gradient rule that need no case here, and why.
const std::map<std::string, std::string> kNoEdgeCases = {
    {"fused_elementwise",
     "made by the fuse pass after autodiff; its rule differentiates the ops it holds, each covered"},
    {"fused_reduction", "made by the fuse pass after autodiff; its rule differentiates the ops it holds, each covered"},
};

/// Every table of cases above, and the ops with a test of their own.
std::vector<GradCase> (*const kTables[])() = {
    unaryActivationsCases,    unaryMathCases,        binaryCases,         reductionsCases,
    softmaxAndNormsCases,     lossesCases,           matrixProductsCases, convPoolEmbeddingCases,
    attentionMaskedRowsCases, shapeAndIndexingCases,
};
const std::set<std::string> kOwnTests = {"dropout"};

TEST(EdgeValues, EveryOpWithAGradientRuleHasCases) {
  std::set<std::string> covered = kOwnTests;
  for (auto* table : kTables)
    for (const GradCase& c : table()) covered.insert(c.op);
  std::string missing;
  for (const auto& [name, def] : OpTable::get().all()) {
    if (!def.grad || kNoEdgeCases.count(name)) continue;
    if (!covered.count(name)) missing += " " + name;
  }
  EXPECT_TRUE(missing.empty()) << "ops with a gradient rule and no edge-value case (add cases to "
                                  "tests/torch/grad_edge_values_test.cpp, or a reason to kNoEdgeCases):"
                               << missing;
  for (const auto& [name, why] : kNoEdgeCases) EXPECT_TRUE(OpTable::get().find(name)) << name << " is not an op";
}

}  // namespace
}  // namespace kiln::testing
