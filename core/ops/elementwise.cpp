// Elementwise ops: binary arithmetic and comparisons with NumPy/PyTorch
// broadcasting and type promotion, unary math and activations, `where`, and
// `cast`. Scalars in PyTorch code (x * 2) arrive as 0-d `full` constants of
// the tensor's dtype, so every binary op here takes two tensors.
#include <cmath>
#include <limits>

#include "core/ops/op_helpers.h"

namespace kiln {
namespace {

std::vector<TensorType> inferBinary(const Node& n) {
  const TensorType& a = n.input(0)->type();
  const TensorType& b = n.input(1)->type();
  DType t = promoteOperands(a.dtype, a.rank() == 0, b.dtype, b.rank() == 0);
  // True division, atan2 and xlogy of integers produce floats, as in PyTorch.
  if ((n.is(Op::div) || n.is(Op::atan2) || n.is(Op::xlogy)) && !isFloating(t)) t = DType::F32;
  return {{t, broadcastShapes(n, a.shape, b.shape)}};
}

std::vector<TensorType> inferCompare(const Node& n) {
  return {{DType::Bool, broadcastShapes(n, n.input(0)->shape(), n.input(1)->shape())}};
}

std::vector<TensorType> inferWhere(const Node& n) {
  if (n.input(0)->dtype() != DType::Bool) opFail(n, "condition must be bool, got " + n.input(0)->type().str());
  Shape s = broadcastShapes(n, n.input(0)->shape(), n.input(1)->shape());
  s = broadcastShapes(n, s, n.input(2)->shape());
  const TensorType& a = n.input(1)->type();
  const TensorType& b = n.input(2)->type();
  return {{promoteOperands(a.dtype, a.rank() == 0, b.dtype, b.rank() == 0), s}};
}

std::vector<TensorType> inferFloatUnary(const Node& n) {
  const TensorType& t = n.input(0)->type();
  if (!isFloating(t.dtype)) opFail(n, "needs a floating-point input, got " + t.str());
  return {t};
}

std::vector<TensorType> inferLogicalNot(const Node& n) { return {{DType::Bool, n.input(0)->shape()}}; }

std::vector<TensorType> inferCast(const Node& n) { return {{n.dt("dtype"), n.input(0)->shape()}}; }

/// Cost of an elementwise op: `k` flops per output element.
template <int k>
Cost elementwiseCost(const Node& n) {
  return {static_cast<double>(k) * static_cast<double>(n.output()->type().numel()), ioBytes(n)};
}

void addBinary(OpTable& t, const char* name, const char* summary, InferFn infer = inferBinary) {
  t.add({name, summary, 2, 2, kElementwise, {}, infer, elementwiseCost<1>});
}

void addUnary(OpTable& t, const char* name, const char* summary, std::vector<AttrSpec> attrs = {},
              InferFn infer = inferFloatUnary, CostFn cost = elementwiseCost<1>) {
  t.add({name, summary, 1, 1, kElementwise, std::move(attrs), infer, cost});
}

}  // namespace

void registerElementwiseOps(OpTable& t) {
  const double inf = std::numeric_limits<double>::infinity();
  addBinary(t, "add", "a + b");
  addBinary(t, "sub", "a - b");
  addBinary(t, "mul", "a * b");
  addBinary(t, "div", "a / b (true division; integers give f32)");
  addBinary(t, "floor_div", "floor(a / b)");
  addBinary(t, "remainder", "a - floor(a / b) * b (Python modulo)");
  addBinary(t, "pow", "a ** b");
  addBinary(t, "maximum", "max(a, b)");
  addBinary(t, "minimum", "min(a, b)");
  addBinary(t, "atan2", "atan2(a, b): the angle of (b, a) in [-pi, pi] (integers give f32)");
  addBinary(t, "xlogy", "a * log(b), 0 where a == 0 unless b is NaN (integers give f32)");
  for (const char* c : {"eq", "ne", "lt", "le", "gt", "ge"}) addBinary(t, c, "comparison -> bool", inferCompare);
  for (const char* c : {"logical_and", "logical_or", "logical_xor"})
    addBinary(t, c, "logical op on truthiness -> bool", inferCompare);
  t.add({"where", "cond ? a : b", 3, 3, kElementwise, {}, inferWhere, elementwiseCost<1>});

  // Same-dtype unary ops (any numeric dtype).
  addUnary(t, "neg", "-x", {}, inferSameAsInput0);
  addUnary(t, "abs", "|x|", {}, inferSameAsInput0);
  addUnary(t, "relu", "max(x, 0)", {}, inferSameAsInput0);
  addUnary(t, "sign", "sign(x)", {}, inferSameAsInput0);
  addUnary(t, "clamp", "min(max(x, min), max)", {optAttr("min", -inf), optAttr("max", inf)}, inferSameAsInput0);
  addUnary(t, "logical_not", "!x -> bool", {}, inferLogicalNot);
  addUnary(t, "cast", "convert to dtype", {reqAttr("dtype", AttrKind::DType)}, inferCast);

  // Floating-point unary math.
  for (const char* u : {"exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tanh", "sigmoid",
                        "erf", "floor", "ceil", "round", "silu", "mish", "hardswish", "hardsigmoid"})
    addUnary(t, u, "elementwise math", {}, inferFloatUnary, elementwiseCost<4>);
  addUnary(t, "gelu", "GELU; approximate=\"none\" (erf) or \"tanh\"", {optAttr("approximate", std::string("none"))},
           inferFloatUnary, elementwiseCost<8>);
  addUnary(t, "hardtanh", "clamp(x, min_val, max_val); relu6 is hardtanh(0, 6)",
           {optAttr("min_val", -1.0), optAttr("max_val", 1.0)}, inferFloatUnary);
  addUnary(t, "leaky_relu", "x > 0 ? x : negative_slope * x", {optAttr("negative_slope", 0.01)});
  addUnary(t, "elu", "x > 0 ? x : alpha * (exp(x) - 1)", {optAttr("alpha", 1.0)}, inferFloatUnary,
           elementwiseCost<4>);
  addUnary(t, "softplus", "log(1 + exp(beta x)) / beta, linear above threshold",
           {optAttr("beta", 1.0), optAttr("threshold", 20.0)}, inferFloatUnary, elementwiseCost<4>);
}

}  // namespace kiln
