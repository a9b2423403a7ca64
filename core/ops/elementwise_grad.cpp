// Gradient rules for the elementwise family (see core/grad.h). Binary ops
// broadcast, so their rules reduce with setGradBroadcast; type promotion in
// the forward is undone by setGrad's cast. Formulas follow PyTorch's
// derivatives.yaml and its *_backward kernels, edge cases included.
//
// Rules that are one existing op (neg, exp, log, div's numerator, where) emit
// that op. The rest go through two fused backward ops, one kernel pass each
// (backend/cpu/kernels_elementwise_grad.cpp), instead of chains of 4-8 nodes:
//   unary_backward(g, v) {fn, fn's attributes}: dL/dx of the unary op `fn`,
//     where v is the forward input x, or the forward output y for the ops
//     whose PyTorch backward reads the result (reads_output in kUnaryGradFns),
//     which lets x die early.
//   binary_backward(g, a, b) {fn, input}: dL/da (input=0) or dL/db (input=1)
//     of fn(a, b) in the broadcast output shape; the rule sums it down.
#include <algorithm>
#include <iterator>

#include "core/grad.h"
#include "core/ops/op_helpers.h"

namespace kiln {
namespace {

/// The unary ops unary_backward implements, and whether it reads y (else x).
struct UnaryGradFn {
  const char* op;
  bool reads_output;
};
constexpr UnaryGradFn kUnaryGradFns[] = {
    {"abs", false},       {"expm1", true},        {"clamp", false},     {"hardtanh", false},   {"log1p", false},
    {"sqrt", true},       {"rsqrt", true},        {"reciprocal", true}, {"sin", false},        {"cos", false},
    {"tanh", true},       {"sigmoid", true},      {"erf", false},       {"silu", false},       {"mish", false},
    {"hardswish", false}, {"hardsigmoid", false}, {"gelu", false},      {"leaky_relu", false}, {"elu", false},
    {"softplus", false},
};
constexpr const char* kBinaryGradFns[] = {"div", "pow", "maximum", "minimum", "atan2", "xlogy"};

const UnaryGradFn* findUnaryGradFn(std::string_view op) {
  for (const UnaryGradFn& f : kUnaryGradFns)
    if (op == f.op) return &f;
  return nullptr;
}

std::vector<TensorType> inferUnaryBackward(const Node& n) {
  const std::string& fn = n.s("fn");
  if (!findUnaryGradFn(fn)) opFail(n, "unknown fn \"" + fn + "\"");
  const TensorType& g = n.input(0)->type();
  const TensorType& v = n.input(1)->type();
  if (!isFloating(g.dtype) || g != v)
    opFail(n, "gradient " + g.str() + " and forward value " + v.str() + " must be the same floating type");
  return {g};
}

std::vector<TensorType> inferBinaryBackward(const Node& n) {
  const std::string& fn = n.s("fn");
  if (std::find(std::begin(kBinaryGradFns), std::end(kBinaryGradFns), fn) == std::end(kBinaryGradFns))
    opFail(n, "unknown fn \"" + fn + "\"");
  if (n.i("input") != 0 && n.i("input") != 1) opFail(n, "input must be 0 or 1, got " + std::to_string(n.i("input")));
  const TensorType& g = n.input(0)->type();
  if (!isFloating(g.dtype)) opFail(n, "needs a floating-point gradient, got " + g.str());
  // The gradient has the forward output's (broadcast) shape.
  Shape ab = broadcastShapes(n, n.input(1)->shape(), n.input(2)->shape());
  if (broadcastShapes(n, ab, g.shape) != g.shape)
    opFail(n, "gradient " + g.str() + " does not have the broadcast shape " + shapeStr(ab));
  return {g};
}

/// A few flops per element (the activations' exp/erf/tanh dominate).
Cost fusedBackwardCost(const Node& n) {
  return {8.0 * static_cast<double>(n.output()->type().numel()), ioBytes(n)};
}

/// unary_backward for the rule's forward node, with all of its attributes
/// (defaults resolved) so the kernel sees exactly what the forward used.
Value* unaryBackward(GradContext& c) {
  const Node& f = c.node();
  AttrMap attrs{{"fn", f.op()}};
  for (const AttrSpec& s : f.def().attrs) attrs[s.name] = *f.attr(s.name);
  Value* v = findUnaryGradFn(f.op())->reads_output ? c.out() : c.in(0);
  return c.op("unary_backward", {c.castTo(c.grad(), v->dtype()), v}, std::move(attrs));
}

void fusedUnaryGrad(GradContext& c) {
  c.setGrad(0, unaryBackward(c));
}

Value* binaryBackward(GradContext& c, int64_t input) {
  return c.op("binary_backward", {c.grad(), c.in(0), c.in(1)}, {{"fn", c.node().op()}, {"input", input}});
}

void fusedBinaryGrad(GradContext& c) {
  for (int64_t i = 0; i < 2; ++i)
    if (c.needs(i)) c.setGradBroadcast(i, binaryBackward(c, i));
}

void addGrad(GradContext& c) {
  c.setGradBroadcast(0, c.grad());
  c.setGradBroadcast(1, c.grad());
}

void subGrad(GradContext& c) {
  c.setGradBroadcast(0, c.grad());
  if (c.needs(1)) c.setGradBroadcast(1, c.op("neg", {c.grad()}));
}

void mulGrad(GradContext& c) {
  if (c.needs(0)) c.setGradBroadcast(0, c.op("mul", {c.grad(), c.in(1)}));
  if (c.needs(1)) c.setGradBroadcast(1, c.op("mul", {c.grad(), c.in(0)}));
}

void divGrad(GradContext& c) {
  if (c.needs(0)) c.setGradBroadcast(0, c.op("div", {c.grad(), c.in(1)}));
  if (c.needs(1)) c.setGradBroadcast(1, binaryBackward(c, 1));  // -g * (a / b) / b
}

void remainderGrad(GradContext& c) {
  // a - floor(a / b) * b: d/da = 1, d/db = -floor(a / b) (PyTorch's floor-rounded div).
  c.setGradBroadcast(0, c.grad());
  if (c.needs(1)) c.setGradBroadcast(1, c.op("neg", {c.op("mul", {c.grad(), c.op("floor_div", {c.in(0), c.in(1)})})}));
}

void whereGrad(GradContext& c) {
  Value* zero = c.scalar(0.0, c.grad()->dtype());
  if (c.needs(1)) c.setGradBroadcast(1, c.op("where", {c.in(0), c.grad(), zero}));
  if (c.needs(2)) c.setGradBroadcast(2, c.op("where", {c.in(0), zero, c.grad()}));
}

void reluGrad(GradContext& c) {
  // PyTorch's threshold_backward on the output: y <= 0 ? 0 : g (a NaN passes g).
  Value* zero = c.scalar(0.0, c.out()->dtype());
  Value* off = c.op("le", {c.out(), zero});
  c.setGrad(0, c.op("where", {off, zero, c.grad()}));
}

void negGrad(GradContext& c) {
  c.setGrad(0, c.op("neg", {c.grad()}));
}
void expGrad(GradContext& c) {
  c.setGrad(0, c.op("mul", {c.grad(), c.out()}));
}  // g * y
void logGrad(GradContext& c) {
  c.setGrad(0, c.op("div", {c.grad(), c.in(0)}));
}  // g / x
/// Between floating dtypes the gradient passes, cast back (setGrad casts).
void castGrad(GradContext& c) {
  c.setGrad(0, c.grad());
}

}  // namespace

void registerElementwiseGrads(OpTable& t) {
  // unary_backward carries every attribute of the ops it covers, with the
  // forward op's default (the rule always copies them all).
  std::vector<AttrSpec> unary_attrs{reqAttr("fn", AttrKind::String)};
  for (const UnaryGradFn& f : kUnaryGradFns)
    for (const AttrSpec& s : t.find(f.op)->attrs)
      if (std::none_of(unary_attrs.begin(), unary_attrs.end(), [&](const AttrSpec& a) { return a.name == s.name; }))
        unary_attrs.push_back(s);
  t.add({"unary_backward", "dL/dx of the unary op `fn` from (g, x), or (g, y) for sqrt/rsqrt/reciprocal/tanh/sigmoid",
         2, 2, kElementwise, std::move(unary_attrs), inferUnaryBackward, fusedBackwardCost});
  t.add({"binary_backward",
         "dL/d(input) of fn(a, b) (div, pow, maximum, minimum, atan2, xlogy) from (g, a, b), broadcast shape",
         3,
         3,
         kElementwise,
         {reqAttr("fn", AttrKind::String), reqAttr("input", AttrKind::Int)},
         inferBinaryBackward,
         fusedBackwardCost});

  t.setGrad("add", addGrad);
  t.setGrad("sub", subGrad);
  t.setGrad("mul", mulGrad);
  t.setGrad("div", divGrad);
  t.setGrad("remainder", remainderGrad);
  t.setGrad("where", whereGrad);
  for (const char* b : {"pow", "maximum", "minimum", "atan2", "xlogy"}) t.setGrad(b, fusedBinaryGrad);
  t.setGrad("relu", reluGrad);
  t.setGrad("neg", negGrad);
  t.setGrad("exp", expGrad);
  t.setGrad("log", logGrad);
  t.setGrad("cast", castGrad);
  for (const UnaryGradFn& f : kUnaryGradFns) t.setGrad(f.op, fusedUnaryGrad);

  for (const char* c : {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not"})
    t.setNoGrad(c, "boolean result");
  for (const char* c : {"sign", "floor", "ceil", "round"})
    t.setNoGrad(c, "piecewise constant: the gradient is zero (as PyTorch's)");
  t.setNoGrad("floor_div", "piecewise constant; PyTorch's floor_divide is not differentiable");
}

}  // namespace kiln
