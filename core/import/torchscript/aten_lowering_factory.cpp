// aten -> Kiln: dtype conversion (to, type_as), identities and copies
// (detach, clone, contiguous), tensor factories (zeros/ones/full/arange and
// their _like / new_ forms) and the in-place-only ops fill_, zero_ and copy_,
// whose result the walker writes into self.
#include "core/import/torchscript/lowering.h"
#include "core/result.h"

namespace kiln::ts {
namespace {

using Out = std::vector<SV>;

// ---- Dtype conversion and identities ---------------------------------------------------

/// The dtype an aten::to call converts to (nullopt: unchanged). Overloads:
/// to(self, dtype, ...), to(self, device, dtype, ...), to(self, other, ...),
/// to(self, dtype?, layout?, device?, pin_memory?, ...), to(self, device?, dtype?, ...).
std::optional<DType> toTarget(Args& a) {
  if (a.size() < 2) return std::nullopt;
  const SV& b = a[1];
  switch (b.kind) {
    case SV::Kind::Int:
      return a.optDType(1);
    case SV::Kind::Device:
      return a.size() > 2 && a[2].kind == SV::Kind::Int ? a.optDType(2) : std::nullopt;
    case SV::Kind::Tensor:
    case SV::Kind::Const:
      return dtypeOf(b);
    case SV::Kind::None:
      return a.size() == 5 && a[2].kind == SV::Kind::Int ? a.optDType(2) : std::nullopt;
    default:
      return std::nullopt;
  }
}

Out lowerTo(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  std::optional<DType> t = a.kiln_op == "type_as" ? dtypeOf(a[1]) : toTarget(a);
  if (!t || *t == x->dtype()) return {a[0]};
  return single(cx, cx.cast(x, *t));
}

// _to_copy(self, dtype=None, ...)
Out lowerToCopy(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  auto t = a.optDType(1);
  return single(cx, t ? cx.cast(x, *t) : x);
}

/// Aliases of the input (alias, lift_fresh): the same tensor.
Out lowerAlias(Lowering&, Args& a) {
  return {a[0]};
}

/// detach(self): the same values, through which no gradient flows.
Out lowerDetach(Lowering& cx, Args& a) {
  return single(cx, cx.emit("detach", {a.tensor(0)}));
}

/// Copies (clone, contiguous): the same value, a tensor of its own.
Out lowerCopy(Lowering& cx, Args& a) {
  return single(cx, a.tensor(0));
}

// ---- Factories ---------------------------------------------------------------------------

Value* fullOf(Lowering& cx, const Shape& shape, double value, DType dtype) {
  for (int64_t d : shape)
    if (d < 0) fail("negative size in " + shapeStr(shape));
  return cx.emit("full", {}, {{"shape", shape}, {"value", value}, {"dtype", dtype}});
}

DType fillDType(const SV& v) {
  if (v.kind == SV::Kind::Bool) return DType::Bool;
  if (v.kind == SV::Kind::Int) return DType::I64;
  if (v.kind == SV::Kind::Const) return v.constant.dtype();
  return DType::F32;
}

// zeros/ones/empty(size, dtype, ...), full(size, fill_value, dtype, ...)
Out lowerFactory(Lowering& cx, Args& a) {
  Shape shape = a.ints(0);
  if (a.kiln_op == "full") {
    return single(cx, fullOf(cx, shape, a.real(1), a.optDType(2).value_or(fillDType(a[1]))));
  }
  double v = a.kiln_op == "ones" ? 1.0 : 0.0;
  return single(cx, fullOf(cx, shape, v, a.optDType(1).value_or(DType::F32)));
}

// zeros_like/ones_like/empty_like(self, dtype, ...), full_like(self, fill_value, dtype, ...)
Out lowerFactoryLike(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  if (a.kiln_op == "full") return single(cx, fullOf(cx, x->shape(), a.real(1), a.optDType(2).value_or(x->dtype())));
  double v = a.kiln_op == "ones" ? 1.0 : 0.0;
  return single(cx, fullOf(cx, x->shape(), v, a.optDType(1).value_or(x->dtype())));
}

// new_zeros/new_ones/new_empty(self, size, dtype, ...), new_full(self, size, fill_value, dtype, ...)
Out lowerFactoryNew(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  Shape shape = a.ints(1);
  if (a.kiln_op == "full") return single(cx, fullOf(cx, shape, a.real(2), a.optDType(3).value_or(x->dtype())));
  double v = a.kiln_op == "ones" ? 1.0 : 0.0;
  return single(cx, fullOf(cx, shape, v, a.optDType(2).value_or(x->dtype())));
}

// fill_(self, value) and zero_(self): the new contents; the walker writes them into self.
Out lowerFill(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  if (a.kiln_op == "zero") return single(cx, fullOf(cx, x->shape(), 0.0, x->dtype()));
  if (a[1].kind == SV::Kind::Tensor) return single(cx, cx.cast(a.tensor(1), x->dtype()));
  return single(cx, fullOf(cx, x->shape(), a.real(1), x->dtype()));
}

// copy_(self, src, non_blocking): src, cast and broadcast to self by the in-place write.
Out lowerCopyInto(Lowering& cx, Args& a) {
  return single(cx, a.tensor(1));
}

// arange(end, ...), arange(start, end, ...), arange(start, end, step, ...)
Out lowerArange(Lowering& cx, Args& a) {
  // The overloads differ in how many numbers precede dtype, layout, device, pin_memory.
  size_t nums = a.size() == 5 ? 1 : a.size() == 6 ? 2 : a.size() == 7 ? 3 : 0;
  if (nums == 0) fail("unexpected arange() overload with " + std::to_string(a.size()) + " arguments");
  double start = 0, end = 0, step = 1;
  bool ints = true;
  auto isIntArg = [&](size_t k) {
    return a[k].kind == SV::Kind::Int || (a[k].isScalarConst() && !isFloating(a[k].constant.dtype()));
  };
  if (nums == 1) {
    end = a.real(0);
    ints = isIntArg(0);
  } else {
    start = a.real(0);
    end = a.real(1);
    ints = isIntArg(0) && isIntArg(1);
    if (nums == 3) {
      step = a.real(2);
      ints = ints && isIntArg(2);
    }
  }
  DType t = a.optDType(nums).value_or(ints ? DType::I64 : DType::F32);
  return single(cx, cx.emit("arange", {}, {{"start", start}, {"end", end}, {"step", step}, {"dtype", t}}));
}

const AtenRule kRules[] = {
    // Dtype and identities.
    {"aten::to", lowerTo, "to"},
    {"aten::type_as", lowerTo, "type_as"},
    {"aten::_to_copy", lowerToCopy},
    {"aten::detach", lowerDetach},
    {"aten::alias", lowerAlias},
    {"aten::lift_fresh", lowerAlias},
    {"aten::clone", lowerCopy},
    {"aten::contiguous", lowerCopy},
    {"aten::lift_fresh_copy", lowerCopy},
    // Factories.
    {"aten::zeros", lowerFactory, "zeros"},
    {"aten::ones", lowerFactory, "ones"},
    {"aten::empty", lowerFactory, "zeros"},
    {"aten::full", lowerFactory, "full"},
    {"aten::zeros_like", lowerFactoryLike, "zeros"},
    {"aten::ones_like", lowerFactoryLike, "ones"},
    {"aten::empty_like", lowerFactoryLike, "zeros"},
    {"aten::full_like", lowerFactoryLike, "full"},
    {"aten::new_zeros", lowerFactoryNew, "zeros"},
    {"aten::new_ones", lowerFactoryNew, "ones"},
    {"aten::new_empty", lowerFactoryNew, "zeros"},
    {"aten::new_full", lowerFactoryNew, "full"},
    {"aten::arange", lowerArange},
    // In-place only (the walker writes the result into self).
    {"aten::fill_", lowerFill, "fill"},
    {"aten::zero_", lowerFill, "zero"},
    {"aten::copy_", lowerCopyInto},
};

}  // namespace

std::span<const AtenRule> factoryRules() {
  return kRules;
}

}  // namespace kiln::ts
