// aten factory overloads -> Kiln `full` and `arange`. Missing dtypes follow
// PyTorch: full/arange infer from their numbers (int -> i64, bool -> bool,
// float -> f32), zeros/ones/empty use f32, *_like and new_* use their
// tensor's dtype. Uninitialized memory (empty) becomes zeros, so imports
// are deterministic. device/layout/pin_memory do not matter.
#include <cmath>

#include "core/import/fx/fx_lowering.h"
#include "core/result.h"

namespace kiln::fx {
namespace {

DType numberDefault(const Number& n) {
  if (n.kind == FxArg::Kind::Bool) return DType::Bool;
  return n.isFloat() ? DType::F32 : DType::I64;
}

/// A shape argument with no -1.
Shape explicitSizes(NodeArgs& a, std::string_view name) {
  Shape s = a.sizes(name);
  for (int64_t d : s)
    if (d < 0) a.fail(name, "negative size in " + shapeStr(s));
  return s;
}

/// The fill value of a factory: kiln names it ("0", "1") or the schema does (fill_value).
double fillValue(NodeArgs& a) { return a.kiln == "0" ? 0.0 : a.kiln == "1" ? 1.0 : a.real("fill_value"); }

/// full / zeros / ones / empty(size, ...).
FxValue lowerFull(Lowering& cx, NodeArgs& a) {
  DType dt = a.optDType("dtype").value_or(a.has("fill_value") ? numberDefault(a.number("fill_value")) : DType::F32);
  return FxValue::of(cx.full(fillValue(a), dt, explicitSizes(a, "size")));
}

/// zeros_like / ones_like / empty_like / full_like(self, ...).
FxValue lowerFullLike(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  return FxValue::of(cx.full(fillValue(a), a.optDType("dtype").value_or(x->dtype()), x->shape()));
}

/// new_zeros / new_ones / new_empty / new_full(self, size, ...).
FxValue lowerNewFull(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  return FxValue::of(cx.full(fillValue(a), a.optDType("dtype").value_or(x->dtype()), explicitSizes(a, "size")));
}

FxValue lowerScalarTensor(Lowering& cx, NodeArgs& a) {
  return FxValue::of(cx.full(a.real("s"), a.optDType("dtype").value_or(DType::F32)));
}

/// fill.Scalar(self, value): self's shape and dtype, every element `value`.
FxValue lowerFillScalar(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  return FxValue::of(cx.full(a.real("value"), x->dtype(), x->shape()));
}

/// zero(self): the functional form of zero_.
FxValue lowerZero(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  return FxValue::of(cx.full(0.0, x->dtype(), x->shape()));
}

/// fill.Tensor(self, value): `value` (0-d) broadcast to self's shape, in self's dtype.
FxValue lowerFillTensor(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  Value* v = a.tensor("value");
  if (v->type().rank() != 0) a.fail("value", "must be a 0-d tensor, got " + v->type().str());
  return FxValue::of(cx.expand(cx.cast(v, x->dtype()), x->shape()));
}

/// arange(.start/.start_step): ints give i64, any float gives f32.
FxValue lowerArange(Lowering& cx, NodeArgs& a) {
  Number start{FxArg::Kind::Int, 0, 0}, step{FxArg::Kind::Int, 1, 1};
  if (a.has("start")) start = a.number("start");
  if (a.has("step")) step = a.number("step");
  Number end = a.number("end");
  bool any_float = start.isFloat() || end.isFloat() || step.isFloat();
  DType dt = a.optDType("dtype").value_or(any_float ? DType::F32 : DType::I64);
  double lo = start.value, hi = end.value, st = step.value;
  if (!std::isfinite(lo) || !std::isfinite(hi) || !std::isfinite(st) || st == 0)
    kiln::fail("arange needs finite bounds and a non-zero step");
  double len = std::ceil((hi - lo) / st);
  if (len < 0) kiln::fail("arange: the step goes away from the end");
  if (len > static_cast<double>(kMaxElements)) kiln::fail("arange: too many elements");
  return FxValue::of(cx.emit("arange", {}, {{"start", lo}, {"end", hi}, {"step", st}, {"dtype", dt}}));
}

// For the factories the third column is the fill value where the schema has none.
constexpr FxRule kRules[] = {
    {"aten.full.default", lowerFull},
    {"aten.zeros.default", lowerFull, "0"},
    {"aten.ones.default", lowerFull, "1"},
    {"aten.empty.memory_format", lowerFull, "0"},
    {"aten.empty.default", lowerFull, "0"},
    {"aten.full_like.default", lowerFullLike},
    {"aten.zeros_like.default", lowerFullLike, "0"},
    {"aten.ones_like.default", lowerFullLike, "1"},
    {"aten.empty_like.default", lowerFullLike, "0"},
    {"aten.new_full.default", lowerNewFull},
    {"aten.new_zeros.default", lowerNewFull, "0"},
    {"aten.new_ones.default", lowerNewFull, "1"},
    {"aten.new_empty.default", lowerNewFull, "0"},
    {"aten.scalar_tensor.default", lowerScalarTensor},
    {"aten.fill.Scalar", lowerFillScalar},
    {"aten.fill.Tensor", lowerFillTensor},
    {"aten.zero.default", lowerZero},
    {"aten.arange.default", lowerArange},
    {"aten.arange.start", lowerArange},
    {"aten.arange.start_step", lowerArange},
};

}  // namespace

std::span<const FxRule> factoryRules() { return kRules; }

}  // namespace kiln::fx
