// fx export of the elementwise family (core/ops/elementwise*.cpp, fused.cpp):
// binary arithmetic and comparisons (aten's .Tensor overloads, which promote
// types and broadcast as Kiln's inference does), unary math and
// activations, where and cast; unary_backward / binary_backward as PyTorch's
// own *_backward ops where aten has one, else the formula of Kiln's kernel
// (backend/cpu/kernels_elementwise_grad.cpp) in the same order; and
// fused_elementwise / fused_reduction, whose body is emitted op by op.
#include <cmath>
#include <limits>

#include "core/export/fx_python_ops.h"
#include "core/ops/op_helpers.h"

namespace kiln::fx {
namespace {

struct Mapping {
  const char* op;
  const char* target;
};

constexpr Mapping kBinary[] = {
    {"add", "aten.add.Tensor"},
    {"sub", "aten.sub.Tensor"},
    {"mul", "aten.mul.Tensor"},
    {"div", "aten.div.Tensor"},
    {"remainder", "aten.remainder.Tensor"},
    {"pow", "aten.pow.Tensor_Tensor"},
    {"maximum", "aten.maximum.default"},
    {"minimum", "aten.minimum.default"},
    {"atan2", "aten.atan2.default"},
    {"xlogy", "aten.xlogy.Tensor"},
    {"eq", "aten.eq.Tensor"},
    {"ne", "aten.ne.Tensor"},
    {"lt", "aten.lt.Tensor"},
    {"le", "aten.le.Tensor"},
    {"gt", "aten.gt.Tensor"},
    {"ge", "aten.ge.Tensor"},
    {"logical_and", "aten.logical_and.default"},
    {"logical_or", "aten.logical_or.default"},
    {"logical_xor", "aten.logical_xor.default"},
};

constexpr Mapping kUnary[] = {
    {"neg", "aten.neg.default"},
    {"abs", "aten.abs.default"},
    {"relu", "aten.relu.default"},
    {"sign", "aten.sign.default"},
    {"logical_not", "aten.logical_not.default"},
    {"detach", "aten.detach.default"},  // a view op in Kiln's table, one tensor in and out like these
    {"exp", "aten.exp.default"},
    {"log", "aten.log.default"},
    {"log1p", "aten.log1p.default"},
    {"expm1", "aten.expm1.default"},
    {"sqrt", "aten.sqrt.default"},
    {"rsqrt", "aten.rsqrt.default"},
    {"reciprocal", "aten.reciprocal.default"},
    {"sin", "aten.sin.default"},
    {"cos", "aten.cos.default"},
    {"tanh", "aten.tanh.default"},
    {"sigmoid", "aten.sigmoid.default"},
    {"erf", "aten.erf.default"},
    {"floor", "aten.floor.default"},
    {"ceil", "aten.ceil.default"},
    {"round", "aten.round.default"},
    {"silu", "aten.silu.default"},
    {"mish", "aten.mish.default"},
    {"hardswish", "aten.hardswish.default"},
    {"hardsigmoid", "aten.hardsigmoid.default"},
};

template <size_t N>
const char* targetOf(const Mapping (&table)[N], const std::string& op) {
  for (const Mapping& m : table)
    if (op == m.op) return m.target;
  return nullptr;
}

void emitBinary(Emitter& e, const Node& n) {
  e.setOut(n, 0, e.call(targetOf(kBinary, n.op()), {e.in(n, 0), e.in(n, 1)}));
}

/// floor(a / b), PyTorch's floor_divide.
void emitFloorDiv(Emitter& e, const Node& n) {
  e.setOut(n, 0, e.call("aten.div.Tensor_mode", {e.in(n, 0), e.in(n, 1)}, {"rounding_mode='floor'"}));
}

void emitWhere(Emitter& e, const Node& n) {
  e.setOut(n, 0, e.call("aten.where.self", {e.in(n, 0), e.in(n, 1), e.in(n, 2)}));
}

void emitUnary(Emitter& e, const Node& n) {
  e.setOut(n, 0, e.call(targetOf(kUnary, n.op()), {e.in(n, 0)}));
}

void emitCast(Emitter& e, const Node& n) {
  e.setOut(n, 0, e.call("aten._to_copy.default", {e.in(n, 0)}, {"dtype=" + pyDType(n.dt("dtype"))}));
}

struct IntRange {
  int64_t lo, hi;
};

IntRange rangeOf(DType t) {
  switch (t) {
    case DType::I32:
      return {std::numeric_limits<int32_t>::lowest(), std::numeric_limits<int32_t>::max()};
    case DType::I16:
      return {std::numeric_limits<int16_t>::lowest(), std::numeric_limits<int16_t>::max()};
    case DType::I8:
      return {std::numeric_limits<int8_t>::lowest(), std::numeric_limits<int8_t>::max()};
    case DType::U8:
      return {0, 255};
    default:
      return {std::numeric_limits<int64_t>::lowest(), std::numeric_limits<int64_t>::max()};
  }
}

/// A clamp bound as aten.clamp takes it: None when it bounds nothing; for
/// integer tensors rounded inwards and saturated to the dtype, as Kiln's
/// ClampOp does (backend/cpu/unary_ops.h).
std::string clampBound(double v, DType t, bool lower) {
  if (isFloating(t)) return std::isinf(v) && (v < 0) == lower ? "None" : pyFloat(v);
  const IntRange r = rangeOf(t);
  v = lower ? std::ceil(v) : std::floor(v);
  if (v <= static_cast<double>(r.lo)) return lower ? "None" : pyInt(r.lo);
  if (v >= static_cast<double>(r.hi)) return lower ? pyInt(r.hi) : "None";
  return pyInt(static_cast<int64_t>(v));
}

void emitClamp(Emitter& e, const Node& n) {
  const DType t = n.input(0)->dtype();
  if (t == DType::Bool) refuse(n, "clamp of a bool tensor has no aten equivalent");
  e.setOut(
      n, 0,
      e.call("aten.clamp.default", {e.in(n, 0), clampBound(n.f("min"), t, true), clampBound(n.f("max"), t, false)}));
}

void emitActivation(Emitter& e, const Node& n) {
  const std::string& x = e.in(n, 0);
  const std::string& op = n.op();
  std::string y;
  if (op == "gelu")
    y = e.call("aten.gelu.default", {x}, {"approximate=" + pyStr(n.s("approximate"))});
  else if (op == "hardtanh")
    y = e.call("aten.hardtanh.default", {x, pyFloat(n.f("min_val")), pyFloat(n.f("max_val"))});
  else if (op == "leaky_relu")
    y = e.call("aten.leaky_relu.default", {x, pyFloat(n.f("negative_slope"))});
  else if (op == "elu")
    y = e.call("aten.elu.default", {x, pyFloat(n.f("alpha")), "1", "1"});
  else  // softplus
    y = e.call("aten.softplus.default", {x, pyFloat(n.f("beta")), pyFloat(n.f("threshold"))});
  e.setOut(n, 0, y);
}

// ---- unary_backward -----------------------------------------------------------------

/// The ops PyTorch has a backward op for, with g and v (x, or y where Kiln's
/// rule passes the output) as its first two arguments.
constexpr Mapping kUnaryGrad[] = {
    {"tanh", "aten.tanh_backward.default"},           {"sigmoid", "aten.sigmoid_backward.default"},
    {"silu", "aten.silu_backward.default"},           {"mish", "aten.mish_backward.default"},
    {"hardswish", "aten.hardswish_backward.default"}, {"hardsigmoid", "aten.hardsigmoid_backward.default"},
};

/// The gradient formula of Kiln's unary_backward kernel for `fn`, in its order.
std::string unaryGradFormula(Emitter& e, const Node& n, const std::string& fn, const std::string& g,
                             const std::string& v) {
  auto mul = [&](const std::string& a, const std::string& b) { return e.call("aten.mul.Tensor", {a, b}); };
  if (fn == "abs") return mul(g, e.call("aten.sign.default", {v}));
  if (fn == "log1p") return e.call("aten.div.Tensor", {g, e.call("aten.add.Scalar", {v, "1"})});
  if (fn == "expm1") return mul(g, e.call("aten.add.Scalar", {v, "1"}));  // g * (y + 1)
  if (fn == "sqrt") return e.call("aten.div.Tensor", {g, e.call("aten.mul.Scalar", {v, "2"})});
  if (fn == "rsqrt") return mul(e.call("aten.mul.Scalar", {g, "-0.5"}), mul(mul(v, v), v));  // -0.5 * g * (y * y * y)
  if (fn == "reciprocal") return mul(e.call("aten.neg.default", {g}), mul(v, v));
  if (fn == "sin") return mul(g, e.call("aten.cos.default", {v}));
  if (fn == "cos") return mul(g, e.call("aten.neg.default", {e.call("aten.sin.default", {v})}));
  if (fn == "erf") {  // 2 / sqrt(pi) * exp(-(x * x)) * g
    std::string ex = e.call("aten.exp.default", {e.call("aten.neg.default", {mul(v, v)})});
    return mul(e.call("aten.mul.Scalar", {ex, pyFloat(M_2_SQRTPI)}), g);
  }
  if (fn == "clamp") {  // passes g on min <= x <= max (a NaN x does not pass)
    std::string lo = e.call("aten.ge.Scalar", {v, pyFloat(n.f("min"))});
    std::string hi = e.call("aten.le.Scalar", {v, pyFloat(n.f("max"))});
    return e.call("aten.where.ScalarOther", {e.call("aten.logical_and.default", {lo, hi}), g, "0.0"});
  }
  if (fn == "hardtanh")
    return e.call("aten.hardtanh_backward.default", {g, v, pyFloat(n.f("min_val")), pyFloat(n.f("max_val"))});
  if (fn == "gelu") {
    // PyTorch 1.13's CPU gelu_backward (the erf form) returns garbage in
    // float32 and bfloat16 when g and x have different memory layouts (a
    // gradient that went through a permute): hand it contiguous operands.
    std::string gc = e.call("aten.contiguous.default", {g}), vc = e.call("aten.contiguous.default", {v});
    return e.call("aten.gelu_backward.default", {gc, vc}, {"approximate=" + pyStr(n.s("approximate"))});
  }
  if (fn == "leaky_relu")
    return e.call("aten.leaky_relu_backward.default", {g, v, pyFloat(n.f("negative_slope")), "False"});
  if (fn == "elu") return e.call("aten.elu_backward.default", {g, pyFloat(n.f("alpha")), "1", "1", "False", v});
  if (fn == "softplus")
    return e.call("aten.softplus_backward.default", {g, v, pyFloat(n.f("beta")), pyFloat(n.f("threshold"))});
  if (const char* t = targetOf(kUnaryGrad, fn)) return e.call(t, {g, v});
  refuse(n, "unary_backward of '" + fn + "' has no torch.fx mapping");
}

void emitUnaryBackward(Emitter& e, const Node& n) {
  e.setOut(n, 0, unaryGradFormula(e, n, n.s("fn"), e.in(n, 0), e.in(n, 1)));
}

// ---- binary_backward ----------------------------------------------------------------

/// dL/da (input 0) or dL/db (input 1) of fn(a, b), as Kiln's BinaryGrad
/// functors: the operands are first converted to the gradient's dtype.
void emitBinaryBackward(Emitter& e, const Node& n) {
  const DType t = n.output()->dtype();
  const std::string& g = e.in(n, 0);
  const std::string a = e.cast(e.in(n, 1), n.input(1)->dtype(), t);
  const std::string b = e.cast(e.in(n, 2), n.input(2)->dtype(), t);
  const std::string& fn = n.s("fn");
  const bool first = n.i("input") == 0;
  auto call = [&](const char* target, std::vector<std::string> args) { return e.call(target, args); };
  std::string r;
  if (fn == "div") {
    r = first ? call("aten.div.Tensor", {g, b})  // -g * ((a / b) / b)
              : call("aten.mul.Tensor",
                     {call("aten.neg.default", {g}), call("aten.div.Tensor", {call("aten.div.Tensor", {a, b}), b})});
  } else if (fn == "pow") {
    if (first) {  // b == 0 ? 0 : g * (b * a^(b - 1))
      std::string p = call("aten.pow.Tensor_Tensor", {a, call("aten.sub.Scalar", {b, "1"})});
      std::string d = call("aten.mul.Tensor", {g, call("aten.mul.Tensor", {b, p})});
      r = call("aten.where.ScalarSelf", {call("aten.eq.Scalar", {b, "0"}), "0.0", d});
    } else {  // g * ((a == 0 & b >= 0) ? 0 : a^b log(a))
      std::string zero =
          call("aten.logical_and.default", {call("aten.eq.Scalar", {a, "0"}), call("aten.ge.Scalar", {b, "0"})});
      std::string d = call("aten.mul.Tensor", {call("aten.pow.Tensor_Tensor", {a, b}), call("aten.log.default", {a})});
      r = call("aten.mul.Tensor", {g, call("aten.where.ScalarSelf", {zero, "0.0", d})});
    }
  } else if (fn == "maximum" || fn == "minimum") {  // ties halve g; the losing side gets 0
    std::string half = call("aten.where.self", {call("aten.eq.Tensor", {a, b}), call("aten.div.Scalar", {g, "2"}), g});
    const bool a_loses_if_less = (fn == "maximum") == first;
    std::string loses = call(a_loses_if_less ? "aten.lt.Tensor" : "aten.gt.Tensor", {a, b});
    r = call("aten.where.ScalarSelf", {loses, "0.0", half});
  } else if (fn == "atan2") {  // g * b * r or g * -a * r, r = 1 / (a * a + b * b)
    std::string sq = call("aten.add.Tensor", {call("aten.mul.Tensor", {a, a}), call("aten.mul.Tensor", {b, b})});
    std::string side = first ? b : call("aten.neg.default", {a});
    r = call("aten.mul.Tensor", {call("aten.mul.Tensor", {g, side}), call("aten.reciprocal.default", {sq})});
  } else if (fn == "xlogy") {  // g * ((a == 0 & b <= 0) ? 0 : log(b)), or g * a / b
    if (first) {
      std::string zero =
          call("aten.logical_and.default", {call("aten.eq.Scalar", {a, "0"}), call("aten.le.Scalar", {b, "0"})});
      r = call("aten.mul.Tensor", {g, call("aten.where.ScalarSelf", {zero, "0.0", call("aten.log.default", {b})})});
    } else {
      r = call("aten.div.Tensor", {call("aten.mul.Tensor", {g, a}), b});
    }
  } else {
    refuse(n, "binary_backward of '" + fn + "' has no torch.fx mapping");
  }
  e.setOut(n, 0, r);
}

// ---- fused nodes --------------------------------------------------------------------

std::vector<std::string> operandsOf(Emitter& e, const Node& n) {
  std::vector<std::string> ops;
  for (size_t i = 0; i < n.numInputs(); ++i) ops.push_back(e.in(n, i));
  return ops;
}

void emitFusedElementwise(Emitter& e, const Node& n) {
  std::vector<std::string> outs = e.emitBody(n, operandsOf(e, n));
  if (outs.size() != n.numOutputs()) refuse(n, "body returns a different number of values than the node");
  for (size_t i = 0; i < outs.size(); ++i) e.setOut(n, i, outs[i]);
}

/// Output 0 is the sum or mean of the body's first output; outputs 1.. are
/// the body's other outputs (core/ops/fused.cpp).
void emitFusedReduction(Emitter& e, const Node& n) {
  std::vector<TensorType> types;
  std::vector<std::string> outs = e.emitBody(n, operandsOf(e, n), &types);
  if (outs.size() != n.numOutputs()) refuse(n, "body returns a different number of values than the node");
  const std::string& reduce = n.s("reduce");
  if (reduce != "sum" && reduce != "mean") refuse(n, "reduce must be sum or mean, got '" + reduce + "'");
  const std::vector<int64_t> axes = reductionAxes(n, n.is("dims"), types[0].rank());
  e.setOut(n, 0, emitSumOrMean(e, reduce == "mean", outs[0], axes, n.i("keepdim") != 0));
  for (size_t i = 1; i < outs.size(); ++i) e.setOut(n, i, outs[i]);
}

}  // namespace

void addElementwiseEmitters(EmitTable& t) {
  for (const Mapping& m : kBinary) t[m.op] = emitBinary;
  t["floor_div"] = emitFloorDiv;
  t["where"] = emitWhere;
  for (const Mapping& m : kUnary) t[m.op] = emitUnary;
  t["cast"] = emitCast;
  t["clamp"] = emitClamp;
  for (const char* a : {"gelu", "hardtanh", "leaky_relu", "elu", "softplus"}) t[a] = emitActivation;
  t["unary_backward"] = emitUnaryBackward;
  t["binary_backward"] = emitBinaryBackward;
  t["fused_elementwise"] = emitFusedElementwise;
  t["fused_reduction"] = emitFusedReduction;
}

}  // namespace kiln::fx
