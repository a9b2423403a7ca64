// aten elementwise overloads -> Kiln elementwise ops: arithmetic with
// PyTorch's dtype promotion (numbers become 0-d `full` of the result dtype),
// comparisons, where/masked_fill, unary math and activations, copies and
// casts, and the random masks of train-mode dropout (bernoulli_).
#include <cmath>
#include <limits>

#include "core/import/decompositions/math.h"
#include "core/import/fx/fx_lowering.h"
#include "core/result.h"

namespace kiln::fx {
namespace {

/// Both operands cast to their PyTorch result dtype.
std::pair<Value*, Value*> promoted(Lowering& cx, const Operand& x, const Operand& y) {
  Operand ops[] = {x, y};
  DType t = resultType(ops);
  return {cx.materialize(x, t), cx.materialize(y, t)};
}

/// self <op> other, with `alpha` scaling other where the schema has it.
FxValue lowerArith(Lowering& cx, NodeArgs& a) {
  auto [x, y] = promoted(cx, a.operand("self"), a.operand("other"));
  if (a.has("alpha")) {
    double alpha = a.real("alpha");
    if (alpha != 1) y = cx.emit("mul", {y, cx.full(alpha, y->dtype())});
  }
  return FxValue::of(cx.emit(a.kiln, {x, y}));
}

/// rsub(self, other, alpha) = other - alpha * self.
FxValue lowerRsub(Lowering& cx, NodeArgs& a) {
  auto [x, y] = promoted(cx, a.operand("self"), a.operand("other"));
  double alpha = a.real("alpha");
  if (alpha != 1) x = cx.emit("mul", {x, cx.full(alpha, x->dtype())});
  return FxValue::of(cx.emit("sub", {y, x}));
}

/// div with rounding_mode None (true division), "floor" or "trunc" (floats only).
FxValue lowerDivMode(Lowering& cx, NodeArgs& a) {
  auto mode = a.optStr("rounding_mode");
  auto [x, y] = promoted(cx, a.operand("self"), a.operand("other"));
  if (!mode) return FxValue::of(cx.emit("div", {x, y}));
  if (*mode == "floor") return FxValue::of(cx.emit("floor_div", {x, y}));
  if (*mode == "trunc") return FxValue::of(decomp::truncDiv(cx, x, y));
  a.fail("rounding_mode", "rounding mode " + quote(*mode) + " is not supported for " + x->type().str());
}

FxValue lowerCompare(Lowering& cx, NodeArgs& a) {
  auto [x, y] = promoted(cx, a.operand("self"), a.operand("other"));
  return FxValue::of(cx.emit(a.kiln, {x, y}));
}

FxValue lowerPow(Lowering& cx, NodeArgs& a) {
  auto [x, y] = promoted(cx, a.operand("self"), a.operand("exponent"));
  return FxValue::of(cx.emit("pow", {x, y}));
}

FxValue lowerLogical(Lowering& cx, NodeArgs& a) {
  return FxValue::of(cx.emit(a.kiln, {a.tensor("self"), a.tensor("other")}));
}

/// bitwise_and/or/xor/not on bool tensors are the logical ops (~mask for an
/// attention mask); Kiln has no integer bitwise ops.
FxValue lowerBitwise(Lowering& cx, NodeArgs& a) {
  std::vector<Value*> in = {a.tensor("self")};
  if (a.kiln != "logical_not") in.push_back(a.tensor("other"));
  for (size_t k = 0; k < in.size(); ++k)
    if (in[k]->dtype() != DType::Bool)
      a.fail(k == 0 ? "self" : "other", "bitwise ops on " + in[k]->type().str() +
                                            " are not supported (Kiln has logical ops on bool tensors only)");
  return FxValue::of(cx.emit(a.kiln, in));
}

/// where(condition, self, other); self/other may be numbers (where.Scalar*).
FxValue lowerWhere(Lowering& cx, NodeArgs& a) {
  Value* cond = a.tensor("condition");
  if (cond->dtype() != DType::Bool) a.fail("condition", "must be bool, got " + cond->type().str());
  auto [x, y] = promoted(cx, a.operand("self"), a.operand("other"));
  return FxValue::of(cx.emit("where", {cond, x, y}));
}

/// masked_fill(self, mask, value) = where(mask, value, self) in self's dtype.
FxValue lowerMaskedFill(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  Value* mask = a.tensor("mask");
  if (mask->dtype() != DType::Bool) a.fail("mask", "must be bool, got " + mask->type().str());
  Value* fill = cx.materialize(a.operand("value"), x->dtype());
  return FxValue::of(cx.emit("where", {mask, fill, x}));
}

/// Ops that keep the input dtype (neg, abs, relu, sign).
FxValue lowerUnary(Lowering& cx, NodeArgs& a) { return FxValue::of(cx.emit(a.kiln, {a.tensor("self")})); }

/// Float math: integer and bool inputs compute in the default dtype f32, as in PyTorch.
Value* floatInput(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  return isFloating(x->dtype()) ? x : cx.cast(x, DType::F32);
}

FxValue lowerFloatUnary(Lowering& cx, NodeArgs& a) { return FxValue::of(cx.emit(a.kiln, {floatInput(cx, a)})); }

/// floor/ceil/round: integers are already whole.
FxValue lowerRounding(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  return FxValue::of(isFloating(x->dtype()) ? cx.emit(a.kiln, {x}) : x);
}

FxValue lowerGelu(Lowering& cx, NodeArgs& a) {
  std::string approx = a.str("approximate");
  if (approx != "none" && approx != "tanh") a.fail("approximate", "expected \"none\" or \"tanh\", got " + quote(approx));
  return FxValue::of(cx.emit("gelu", {floatInput(cx, a)}, {{"approximate", approx}}));
}

FxValue lowerHardtanh(Lowering& cx, NodeArgs& a) {
  return FxValue::of(
      cx.emit("hardtanh", {floatInput(cx, a)}, {{"min_val", a.real("min_val")}, {"max_val", a.real("max_val")}}));
}

FxValue lowerLeakyRelu(Lowering& cx, NodeArgs& a) {
  return FxValue::of(cx.emit("leaky_relu", {a.tensor("self")}, {{"negative_slope", a.real("negative_slope")}}));
}

/// elu(self, alpha, scale, input_scale) (SELU and CELU too); celu(self, alpha).
FxValue lowerElu(Lowering& cx, NodeArgs& a) {
  Value* x = floatInput(cx, a);
  const double alpha = a.real("alpha");
  if (a.kiln == "celu") return FxValue::of(decomp::elu(cx, x, alpha, 1.0, 1.0 / alpha));
  return FxValue::of(decomp::elu(cx, x, alpha, a.real("scale"), a.real("input_scale")));
}

/// trunc: floats round toward zero, integers are their own truncation.
FxValue lowerTrunc(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  return FxValue::of(isFloating(x->dtype()) ? decomp::truncate(cx, x) : x);
}

/// prelu / _prelu_kernel(self, weight): one slope per channel (dim 1) or one for all.
FxValue lowerPrelu(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  return FxValue::of(decomp::prelu(cx, x, cx.cast(a.tensor("weight"), x->dtype())));
}

FxValue lowerShrink(Lowering& cx, NodeArgs& a) {
  return FxValue::of(decomp::shrink(cx, floatInput(cx, a), a.real("lambd"), a.kiln == "hard"));
}

FxValue lowerGlu(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  return FxValue::of(decomp::glu(cx, x, normDim(a.integer("dim"), x->type().rank())));
}

/// log_sigmoid_forward(self) -> (output, buffer): -softplus(-x); the buffer
/// (a CPU-kernel scratch tensor) is not computed.
FxValue lowerLogSigmoid(Lowering& cx, NodeArgs& a) {
  Value* x = floatInput(cx, a);
  Value* y = cx.emit("neg", {cx.emit("softplus", {cx.emit("neg", {x})})});
  return FxValue::tuple({FxValue::of(y), FxValue::missing("log_sigmoid_forward's buffer is not computed by Kiln")});
}

/// xlogy.Tensor / .Scalar_Other / .Scalar_Self(self, other): what make_fx turns kl_div into.
FxValue lowerXlogy(Lowering& cx, NodeArgs& a) {
  auto [x, y] = promoted(cx, a.operand("self"), a.operand("other"));
  if (!isFloating(x->dtype())) {
    x = cx.cast(x, DType::F32);
    y = cx.cast(y, DType::F32);
  }
  return FxValue::of(cx.emit("xlogy", {x, y}));
}

/// addcmul / addcdiv(self, tensor1, tensor2, value=1) = self + value * (t1 op t2).
FxValue lowerAddc(Lowering& cx, NodeArgs& a) {
  Operand ops[] = {a.operand("self"), a.operand("tensor1"), a.operand("tensor2")};
  const DType t = resultType(ops);
  Value* p = cx.emit(a.kiln, {cx.materialize(ops[1], t), cx.materialize(ops[2], t)});
  const double value = a.real("value");
  if (value != 1) p = cx.emit("mul", {p, cx.full(value, t)});
  return FxValue::of(cx.emit("add", {cx.materialize(ops[0], t), p}));
}

FxValue lowerSoftplus(Lowering& cx, NodeArgs& a) {
  return FxValue::of(
      cx.emit("softplus", {floatInput(cx, a)}, {{"beta", a.real("beta")}, {"threshold", a.real("threshold")}}));
}

/// clamp with number bounds; the bounds take part in dtype promotion.
Value* clampNumbers(Lowering& cx, Value* x, std::optional<Number> lo, std::optional<Number> hi) {
  std::vector<Operand> ops = {{x, {}}};
  if (lo) ops.push_back({nullptr, *lo});
  if (hi) ops.push_back({nullptr, *hi});
  x = cx.cast(x, resultType(ops));
  const double inf = std::numeric_limits<double>::infinity();
  return cx.emit("clamp", {x}, {{"min", lo ? lo->value : -inf}, {"max", hi ? hi->value : inf}});
}

FxValue lowerClamp(Lowering& cx, NodeArgs& a) {
  auto bound = [&](const char* name) -> std::optional<Number> {
    if (!a.has(name) || !a.given(name)) return std::nullopt;
    return a.number(name);
  };
  auto lo = bound("min"), hi = bound("max");
  if (!lo && !hi) kiln::fail("clamp needs at least one of min and max");
  return FxValue::of(clampNumbers(cx, a.tensor("self"), lo, hi));
}

/// clamp.Tensor(self, min?, max?) = minimum(maximum(self, min), max).
FxValue lowerClampTensor(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  if (Value* lo = a.optTensor("min")) {
    auto [p, q] = promoted(cx, {x, {}}, {lo, {}});
    x = cx.emit("maximum", {p, q});
  }
  if (Value* hi = a.optTensor("max")) {
    auto [p, q] = promoted(cx, {x, {}}, {hi, {}});
    x = cx.emit("minimum", {p, q});
  }
  return FxValue::of(x);
}

/// threshold(self, threshold, value) = self > threshold ? self : value.
FxValue lowerThreshold(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  Value* keep = cx.emit("gt", {x, cx.full(a.real("threshold"), x->dtype())});
  return FxValue::of(cx.emit("where", {keep, x, cx.full(a.real("value"), x->dtype())}));
}

FxValue lowerSquare(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  return FxValue::of(cx.emit("mul", {x, x}));
}

/// Copies and aliases: Kiln values are immutable and contiguous, so these are the input itself.
FxValue lowerIdentity(Lowering&, NodeArgs& a) { return FxValue::of(a.tensor("self")); }

/// _to_copy / to: a cast when a dtype is given (device, layout, memory format do not matter).
FxValue lowerToCopy(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  auto dt = a.optDType("dtype");
  return FxValue::of(dt ? cx.cast(x, *dt) : x);
}

/// bernoulli_(self, p): a fresh tensor shaped like self, 1 with probability
/// p. The dumper guarantees self is a fresh intermediate (empty_like), so the
/// in-place op is read functionally. Kiln's dropout keeps an element with
/// probability 1 - p_drop and reports the keep-mask as its second result.
FxValue lowerBernoulli(Lowering& cx, NodeArgs& a) {
  Value* like = a.tensor("self");
  if (a.has("generator") && a.given("generator")) kiln::fail("an explicit random generator is not supported");
  double p = a.real("p");
  if (!(p >= 0 && p <= 1)) a.fail("p", "probability " + std::to_string(p) + " is not in [0, 1]");
  DType dt = isFloating(like->dtype()) ? like->dtype() : DType::F32;
  Node* drop = cx.emitNode("dropout", {cx.full(1, dt, like->shape())}, {{"p", 1 - p}, {"training", int64_t{1}}});
  return FxValue::of(cx.cast(drop->output(1), like->dtype()));
}

constexpr FxRule kRules[] = {
    // Arithmetic: Tensor and Scalar overloads share a rule; numbers are operands too.
    {"aten.add.Tensor", lowerArith, "add"},
    {"aten.add.Scalar", lowerArith, "add"},
    {"aten.sub.Tensor", lowerArith, "sub"},
    {"aten.sub.Scalar", lowerArith, "sub"},
    {"aten.mul.Tensor", lowerArith, "mul"},
    {"aten.mul.Scalar", lowerArith, "mul"},
    {"aten.div.Tensor", lowerArith, "div"},
    {"aten.div.Scalar", lowerArith, "div"},
    {"aten.div.Tensor_mode", lowerDivMode},
    {"aten.div.Scalar_mode", lowerDivMode},
    {"aten.rsub.Tensor", lowerRsub},
    {"aten.rsub.Scalar", lowerRsub},
    {"aten.floor_divide.default", lowerArith, "floor_div"},
    {"aten.floor_divide.Scalar", lowerArith, "floor_div"},
    {"aten.remainder.Tensor", lowerArith, "remainder"},
    {"aten.remainder.Scalar", lowerArith, "remainder"},
    {"aten.maximum.default", lowerArith, "maximum"},
    {"aten.minimum.default", lowerArith, "minimum"},
    {"aten.atan2.default", lowerArith, "atan2"},
    {"aten.pow.Tensor_Scalar", lowerPow},
    {"aten.pow.Tensor_Tensor", lowerPow},
    {"aten.pow.Scalar", lowerPow},
    {"aten.square.default", lowerSquare},
    // Comparisons -> bool.
    {"aten.eq.Tensor", lowerCompare, "eq"},
    {"aten.eq.Scalar", lowerCompare, "eq"},
    {"aten.ne.Tensor", lowerCompare, "ne"},
    {"aten.ne.Scalar", lowerCompare, "ne"},
    {"aten.lt.Tensor", lowerCompare, "lt"},
    {"aten.lt.Scalar", lowerCompare, "lt"},
    {"aten.le.Tensor", lowerCompare, "le"},
    {"aten.le.Scalar", lowerCompare, "le"},
    {"aten.gt.Tensor", lowerCompare, "gt"},
    {"aten.gt.Scalar", lowerCompare, "gt"},
    {"aten.ge.Tensor", lowerCompare, "ge"},
    {"aten.ge.Scalar", lowerCompare, "ge"},
    {"aten.logical_and.default", lowerLogical, "logical_and"},
    {"aten.logical_or.default", lowerLogical, "logical_or"},
    {"aten.logical_xor.default", lowerLogical, "logical_xor"},
    {"aten.logical_not.default", lowerUnary, "logical_not"},
    {"aten.bitwise_not.default", lowerBitwise, "logical_not"},
    {"aten.bitwise_and.Tensor", lowerBitwise, "logical_and"},
    {"aten.bitwise_or.Tensor", lowerBitwise, "logical_or"},
    {"aten.bitwise_xor.Tensor", lowerBitwise, "logical_xor"},
    // Selection.
    {"aten.where.self", lowerWhere},
    {"aten.where.ScalarSelf", lowerWhere},
    {"aten.where.ScalarOther", lowerWhere},
    {"aten.where.Scalar", lowerWhere},
    {"aten.masked_fill.Scalar", lowerMaskedFill},
    {"aten.masked_fill.Tensor", lowerMaskedFill},
    // Unary, dtype kept.
    {"aten.neg.default", lowerUnary, "neg"},
    {"aten.abs.default", lowerUnary, "abs"},
    {"aten.relu.default", lowerUnary, "relu"},
    {"aten.sign.default", lowerUnary, "sign"},
    // Unary float math (integer inputs compute in f32).
    {"aten.exp.default", lowerFloatUnary, "exp"},
    {"aten.log.default", lowerFloatUnary, "log"},
    {"aten.log1p.default", lowerFloatUnary, "log1p"},
    {"aten.expm1.default", lowerFloatUnary, "expm1"},
    {"aten.sqrt.default", lowerFloatUnary, "sqrt"},
    {"aten.rsqrt.default", lowerFloatUnary, "rsqrt"},
    {"aten.reciprocal.default", lowerFloatUnary, "reciprocal"},
    {"aten.sin.default", lowerFloatUnary, "sin"},
    {"aten.cos.default", lowerFloatUnary, "cos"},
    {"aten.tanh.default", lowerFloatUnary, "tanh"},
    {"aten.sigmoid.default", lowerFloatUnary, "sigmoid"},
    {"aten.erf.default", lowerFloatUnary, "erf"},
    {"aten.floor.default", lowerRounding, "floor"},
    {"aten.ceil.default", lowerRounding, "ceil"},
    {"aten.round.default", lowerRounding, "round"},
    // Activations.
    {"aten.silu.default", lowerFloatUnary, "silu"},
    {"aten.mish.default", lowerFloatUnary, "mish"},
    {"aten.hardswish.default", lowerFloatUnary, "hardswish"},
    {"aten.hardsigmoid.default", lowerFloatUnary, "hardsigmoid"},
    {"aten.gelu.default", lowerGelu},
    {"aten.hardtanh.default", lowerHardtanh},
    {"aten.leaky_relu.default", lowerLeakyRelu},
    {"aten.elu.default", lowerElu},
    {"aten.celu.default", lowerElu, "celu"},
    {"aten.trunc.default", lowerTrunc},
    {"aten.prelu.default", lowerPrelu},
    {"aten._prelu_kernel.default", lowerPrelu},
    {"aten.hardshrink.default", lowerShrink, "hard"},
    {"aten.softshrink.default", lowerShrink, "soft"},
    {"aten.glu.default", lowerGlu},
    {"aten.log_sigmoid_forward.default", lowerLogSigmoid},
    {"aten.addcmul.default", lowerAddc, "mul"},
    {"aten.xlogy.Tensor", lowerXlogy},
    {"aten.xlogy.Scalar_Other", lowerXlogy},
    {"aten.xlogy.Scalar_Self", lowerXlogy},
    {"aten.addcdiv.default", lowerAddc, "div"},
    {"aten.softplus.default", lowerSoftplus},
    {"aten.threshold.default", lowerThreshold},
    {"aten.clamp.default", lowerClamp},
    {"aten.clamp.Tensor", lowerClampTensor},
    {"aten.clamp_min.default", lowerClamp},
    {"aten.clamp_max.default", lowerClamp},
    // Copies, aliases and casts.
    {"aten.clone.default", lowerIdentity},
    {"aten.alias.default", lowerIdentity},
    {"aten.detach.default", lowerUnary, "detach"},
    {"aten.lift_fresh_copy.default", lowerIdentity},
    {"aten.lift_fresh.default", lowerIdentity},
    {"aten._to_copy.default", lowerToCopy},
    // Random masks (train-mode dropout and stochastic depth on torch 1.13).
    {"aten.bernoulli_.float", lowerBernoulli},
    {"aten.bernoulli.p", lowerBernoulli},
};

}  // namespace

std::span<const FxRule> elementwiseRules() { return kRules; }

}  // namespace kiln::fx
