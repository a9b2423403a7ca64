// aten -> Kiln: elementwise arithmetic, comparisons, logic, activations and
// unary math. Python scalars and 0-d tensors become 0-d `full` constants of
// the dtype PyTorch would compute in (resultType), and tensor operands are
// cast to it, so Kiln's binary ops see two tensors of one dtype.
#include <cmath>

#include "core/import/decompositions/math.h"
#include "core/import/torchscript/lowering.h"
#include "core/result.h"

namespace kiln::ts {
namespace {

using Out = std::vector<SV>;

/// Both operands as tensors of PyTorch's result dtype `t`.
std::pair<Value*, Value*> promoted(Lowering& cx, const SV& a, const SV& b, DType t) {
  return {cx.operand(a, t), cx.operand(b, t)};
}

/// y * alpha when alpha is given and not 1.
Value* scaled(Lowering& cx, Value* y, const Args& a, size_t k) {
  if (!a.given(k) || a.real(k) == 1.0) return y;
  return cx.emit("mul", {y, cx.scalar(a.real(k), y->dtype())});
}

Out lowerBinary(Lowering& cx, Args& a) {
  DType t = resultType(a[0], a[1]);
  auto [x, y] = promoted(cx, a[0], a[1], t);
  return single(cx, cx.emit(a.kiln_op, {x, y}));
}

// add(self, other, alpha) / sub(self, other, alpha)
Out lowerAddSub(Lowering& cx, Args& a) {
  DType t = resultType(a[0], a[1]);
  auto [x, y] = promoted(cx, a[0], a[1], t);
  return single(cx, cx.emit(a.kiln_op, {x, scaled(cx, y, a, 2)}));
}

// rsub(self, other, alpha) = other - alpha * self
Out lowerRsub(Lowering& cx, Args& a) {
  DType t = resultType(a[0], a[1]);
  auto [x, y] = promoted(cx, a[0], a[1], t);
  return single(cx, cx.emit("sub", {y, scaled(cx, x, a, 2)}));
}

// div(self, other, rounding_mode=None|"floor"|"trunc")
Out lowerDiv(Lowering& cx, Args& a) {
  DType t = resultType(a[0], a[1]);
  std::string mode = a.given(2) ? a.str(2) : "";
  if (mode.empty()) {
    if (!isFloating(t)) t = DType::F32;  // true division of integers
    auto [x, y] = promoted(cx, a[0], a[1], t);
    return single(cx, cx.emit("div", {x, y}));
  }
  auto [x, y] = promoted(cx, a[0], a[1], t);
  if (mode == "floor") return single(cx, cx.emit("floor_div", {x, y}));
  if (mode != "trunc") fail("unknown rounding_mode \"" + mode + "\"");
  return single(cx, decomp::truncDiv(cx, x, y));
}

Out lowerCompare(Lowering& cx, Args& a) {
  DType t = resultType(a[0], a[1]);
  auto [x, y] = promoted(cx, a[0], a[1], t);
  return single(cx, cx.emit(a.kiln_op, {x, y}));
}

// logical_and/or/xor on any dtype (truthiness); bitwise_* and &|^ on bools only.
Out lowerLogical(Lowering& cx, Args& a) {
  DType t = resultType(a[0], a[1]);
  auto [x, y] = promoted(cx, a[0], a[1], t);
  return single(cx, cx.emit(a.kiln_op, {x, y}));
}

Out lowerBitwise(Lowering& cx, Args& a) {
  if (resultType(a[0], a[1]) != DType::Bool)
    fail("bitwise ops on integer tensors are not supported (Kiln has logical ops on bool tensors only)");
  return lowerLogical(cx, a);
}

Out lowerNot(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  if (a.kiln_op == "bitwise_not" && x->dtype() != DType::Bool)
    fail("bitwise_not of an integer tensor is not supported (Kiln has logical_not on bool tensors only)");
  return single(cx, cx.emit("logical_not", {x}));
}

// where(condition, self, other)
Out lowerWhere(Lowering& cx, Args& a) {
  if (a.size() == 1) fail("where(condition) has a data-dependent shape; Kiln needs static shapes");
  Value* c = cx.cast(a.tensor(0), DType::Bool);
  DType t = resultType(a[1], a[2]);
  auto [x, y] = promoted(cx, a[1], a[2], t);
  return single(cx, cx.emit("where", {c, x, y}));
}

// masked_fill(self, mask, value): the result keeps self's dtype.
Out lowerMaskedFill(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  Value* m = cx.cast(a.tensor(1), DType::Bool);
  Value* v = cx.operand(a[2], x->dtype());
  return single(cx, cx.emit("where", {m, v, x}));
}

// clamp(self, min=None, max=None) with numbers or tensors; clamp_min / clamp_max.
Out lowerClamp(Lowering& cx, Args& a) {
  SV lo = a.kiln_op == "clamp_max" ? SV::none() : a[1];
  SV hi = a.kiln_op == "clamp_max" ? a[1] : a.kiln_op == "clamp_min" ? SV::none() : (a.size() > 2 ? a[2] : SV::none());
  std::vector<const SV*> ops = {&a[0]};
  if (!lo.isNone()) ops.push_back(&lo);
  if (!hi.isNone()) ops.push_back(&hi);
  DType t = resultType(ops);
  Value* x = cx.operand(a[0], t);
  auto isNum = [](const SV& v) { return v.isNone() || v.isNumber() || v.isScalarConst(); };
  if (isNum(lo) && isNum(hi)) {
    AttrMap attrs;
    if (!lo.isNone()) attrs["min"] = lo.number();
    if (!hi.isNone()) attrs["max"] = hi.number();
    return single(cx, cx.emit("clamp", {x}, attrs));
  }
  if (!lo.isNone()) x = cx.emit("maximum", {x, cx.operand(lo, t)});
  if (!hi.isNone()) x = cx.emit("minimum", {x, cx.operand(hi, t)});
  return single(cx, x);
}

Out lowerSameDtypeUnary(Lowering& cx, Args& a) {
  return single(cx, cx.emit(a.kiln_op, {a.tensor(0)}));
}

/// Unary math: integer inputs compute in f32, as in PyTorch.
Value* floatInput(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  return isFloating(x->dtype()) ? x : cx.cast(x, DType::F32);
}

Out lowerFloatUnary(Lowering& cx, Args& a) {
  return single(cx, cx.emit(a.kiln_op, {floatInput(cx, a)}));
}

// floor/ceil/round/trunc of an integer tensor is the tensor itself.
Out lowerRounding(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  if (!isFloating(x->dtype())) return single(cx, x);
  if (a.given(1) && a.integer(1) != 0) fail("round(decimals != 0) is not supported");
  if (a.kiln_op == "trunc") return single(cx, decomp::truncate(cx, x));
  return single(cx, cx.emit(a.kiln_op, {x}));
}

// gelu(self, approximate="none")
Out lowerGelu(Lowering& cx, Args& a) {
  std::string approx = a.given(1) ? a.str(1) : "none";
  return single(cx, cx.emit("gelu", {floatInput(cx, a)}, {{"approximate", approx}}));
}

// hardtanh(self, min_val=-1, max_val=1); relu6(self) = hardtanh(self, 0, 6)
Out lowerHardtanh(Lowering& cx, Args& a) {
  double lo = a.kiln_op == "relu6" ? 0.0 : (a.given(1) ? a.real(1) : -1.0);
  double hi = a.kiln_op == "relu6" ? 6.0 : (a.given(2) ? a.real(2) : 1.0);
  return single(cx, cx.emit("hardtanh", {floatInput(cx, a)}, {{"min_val", lo}, {"max_val", hi}}));
}

// leaky_relu(self, negative_slope=0.01)
Out lowerLeakyRelu(Lowering& cx, Args& a) {
  double slope = a.given(1) ? a.real(1) : 0.01;
  return single(cx, cx.emit("leaky_relu", {floatInput(cx, a)}, {{"negative_slope", slope}}));
}

// elu(self, alpha=1, scale=1, input_scale=1); selu; celu(self, alpha) = elu(self, alpha, 1, 1 / alpha)
Out lowerElu(Lowering& cx, Args& a) {
  Value* x = floatInput(cx, a);
  if (a.kiln_op == "selu")
    return single(cx, decomp::elu(cx, x, 1.6732632423543772848170429916717, 1.0507009873554804934193349852946, 1.0));
  double alpha = a.given(1) ? a.real(1) : 1.0;
  if (a.kiln_op == "celu") return single(cx, decomp::elu(cx, x, alpha, 1.0, 1.0 / alpha));
  return single(cx, decomp::elu(cx, x, alpha, a.given(2) ? a.real(2) : 1.0, a.given(3) ? a.real(3) : 1.0));
}

// softplus(self, beta=1, threshold=20)
Out lowerSoftplus(Lowering& cx, Args& a) {
  double beta = a.given(1) ? a.real(1) : 1.0, threshold = a.given(2) ? a.real(2) : 20.0;
  return single(cx, cx.emit("softplus", {floatInput(cx, a)}, {{"beta", beta}, {"threshold", threshold}}));
}

// log_sigmoid(x) = -softplus(-x)
Out lowerLogSigmoid(Lowering& cx, Args& a) {
  Value* x = floatInput(cx, a);
  return single(cx, cx.emit("neg", {cx.emit("softplus", {cx.emit("neg", {x})})}));
}

// prelu(self, weight): one slope per channel (dim 1) or a single one.
Out lowerPrelu(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  return single(cx, decomp::prelu(cx, x, cx.cast(a.tensor(1), x->dtype())));
}

// threshold(self, threshold, value) = x > threshold ? x : value
Out lowerThreshold(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  Value* keep = cx.emit("gt", {x, cx.operand(a[1], x->dtype())});
  return single(cx, cx.emit("where", {keep, x, cx.operand(a[2], x->dtype())}));
}

// hardshrink(self, lambd=0.5) / softshrink(self, lambd=0.5)
Out lowerShrink(Lowering& cx, Args& a) {
  return single(cx, decomp::shrink(cx, floatInput(cx, a), a.given(1) ? a.real(1) : 0.5, a.kiln_op == "hard"));
}

// glu(self, dim=-1) = a * sigmoid(b) for the two halves along dim
Out lowerGlu(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  return single(cx, decomp::glu(cx, x, normDim(a.given(1) ? a.integer(1) : -1, x->type().rank())));
}

// xlogy(self, other) = self * log(other), 0 where self == 0 (unless other is NaN)
Out lowerXlogy(Lowering& cx, Args& a) {
  DType t = resultType(a[0], a[1]);
  if (!isFloating(t)) t = DType::F32;
  auto [x, y] = promoted(cx, a[0], a[1], t);
  return single(cx, cx.emit("xlogy", {x, y}));
}

Out lowerSquare(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  if (x->dtype() == DType::Bool) x = cx.cast(x, DType::I64);
  return single(cx, cx.emit("mul", {x, x}));
}

// addcmul(self, t1, t2, value) = self + value * t1 * t2; addcdiv likewise with t1 / t2.
Out lowerAddc(Lowering& cx, Args& a) {
  const SV* ops[] = {&a[0], &a[1], &a[2]};
  DType t = resultType(ops);
  Value* x = cx.operand(a[0], t);
  Value* p = cx.emit(a.kiln_op, {cx.operand(a[1], t), cx.operand(a[2], t)});
  return single(cx, cx.emit("add", {x, scaled(cx, p, a, 3)}));
}

const AtenRule kRules[] = {
    // Arithmetic (Tensor and Scalar overloads alike).
    {"aten::add", lowerAddSub, "add"},
    {"aten::sub", lowerAddSub, "sub"},
    {"aten::subtract", lowerAddSub, "sub"},
    {"aten::rsub", lowerRsub},
    {"aten::mul", lowerBinary, "mul"},
    {"aten::multiply", lowerBinary, "mul"},
    {"aten::div", lowerDiv},
    {"aten::divide", lowerDiv},
    {"aten::true_divide", lowerDiv},
    {"aten::floor_divide", lowerBinary, "floor_div"},
    {"aten::remainder", lowerBinary, "remainder"},
    {"aten::pow", lowerBinary, "pow"},
    {"aten::maximum", lowerBinary, "maximum"},
    {"aten::minimum", lowerBinary, "minimum"},
    {"aten::atan2", lowerBinary, "atan2"},
    {"aten::addcmul", lowerAddc, "mul"},
    {"aten::xlogy", lowerXlogy},
    {"aten::addcdiv", lowerAddc, "div"},
    {"aten::square", lowerSquare},
    // Comparisons -> bool.
    {"aten::eq", lowerCompare, "eq"},
    {"aten::ne", lowerCompare, "ne"},
    {"aten::lt", lowerCompare, "lt"},
    {"aten::le", lowerCompare, "le"},
    {"aten::gt", lowerCompare, "gt"},
    {"aten::ge", lowerCompare, "ge"},
    // Logic.
    {"aten::logical_and", lowerLogical, "logical_and"},
    {"aten::logical_or", lowerLogical, "logical_or"},
    {"aten::logical_xor", lowerLogical, "logical_xor"},
    {"aten::logical_not", lowerNot, "logical_not"},
    {"aten::bitwise_and", lowerBitwise, "logical_and"},
    {"aten::bitwise_or", lowerBitwise, "logical_or"},
    {"aten::bitwise_xor", lowerBitwise, "logical_xor"},
    {"aten::bitwise_not", lowerNot, "bitwise_not"},
    {"aten::__and__", lowerBitwise, "logical_and"},
    {"aten::__or__", lowerBitwise, "logical_or"},
    {"aten::__xor__", lowerBitwise, "logical_xor"},
    // Selection.
    {"aten::where", lowerWhere},
    {"aten::masked_fill", lowerMaskedFill},
    {"aten::clamp", lowerClamp, "clamp"},
    {"aten::clip", lowerClamp, "clamp"},
    {"aten::clamp_min", lowerClamp, "clamp_min"},
    {"aten::clamp_max", lowerClamp, "clamp_max"},
    // Unary, same dtype.
    {"aten::neg", lowerSameDtypeUnary, "neg"},
    {"aten::negative", lowerSameDtypeUnary, "neg"},
    {"aten::abs", lowerSameDtypeUnary, "abs"},
    {"aten::relu", lowerSameDtypeUnary, "relu"},
    {"aten::sign", lowerSameDtypeUnary, "sign"},
    {"aten::floor", lowerRounding, "floor"},
    {"aten::ceil", lowerRounding, "ceil"},
    {"aten::round", lowerRounding, "round"},
    {"aten::trunc", lowerRounding, "trunc"},
    // Unary math (integers compute in f32).
    {"aten::exp", lowerFloatUnary, "exp"},
    {"aten::log", lowerFloatUnary, "log"},
    {"aten::log1p", lowerFloatUnary, "log1p"},
    {"aten::expm1", lowerFloatUnary, "expm1"},
    {"aten::sqrt", lowerFloatUnary, "sqrt"},
    {"aten::rsqrt", lowerFloatUnary, "rsqrt"},
    {"aten::reciprocal", lowerFloatUnary, "reciprocal"},
    {"aten::sin", lowerFloatUnary, "sin"},
    {"aten::cos", lowerFloatUnary, "cos"},
    {"aten::erf", lowerFloatUnary, "erf"},
    // Activations.
    {"aten::tanh", lowerFloatUnary, "tanh"},
    {"aten::sigmoid", lowerFloatUnary, "sigmoid"},
    {"aten::silu", lowerFloatUnary, "silu"},
    {"aten::mish", lowerFloatUnary, "mish"},
    {"aten::hardswish", lowerFloatUnary, "hardswish"},
    {"aten::hardsigmoid", lowerFloatUnary, "hardsigmoid"},
    {"aten::gelu", lowerGelu},
    {"aten::hardtanh", lowerHardtanh, "hardtanh"},
    {"aten::relu6", lowerHardtanh, "relu6"},
    {"aten::leaky_relu", lowerLeakyRelu},
    {"aten::elu", lowerElu, "elu"},
    {"aten::selu", lowerElu, "selu"},
    {"aten::celu", lowerElu, "celu"},
    {"aten::softplus", lowerSoftplus},
    {"aten::log_sigmoid", lowerLogSigmoid},
    {"aten::prelu", lowerPrelu},
    {"aten::threshold", lowerThreshold},
    {"aten::hardshrink", lowerShrink, "hard"},
    {"aten::softshrink", lowerShrink, "soft"},
    {"aten::glu", lowerGlu},
};

}  // namespace

std::span<const AtenRule> elementwiseRules() {
  return kRules;
}

}  // namespace kiln::ts
