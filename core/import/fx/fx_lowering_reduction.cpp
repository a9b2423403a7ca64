// aten reductions -> Kiln reductions: sum/mean/amax/amin/prod over dim lists
// (None or [] = all dims), var/std with Bessel correction, max/min with
// indices, arg-reductions and cumsum. A `dtype` argument casts the input
// first, as PyTorch does.
#include "core/import/decompositions/index.h"
#include "core/import/decompositions/math.h"
#include "core/import/fx/fx_lowering.h"
#include "core/result.h"

namespace kiln::fx {
namespace {

/// The input, cast to the `dtype` argument when the schema has one and it is given.
Value* input(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  if (a.has("dtype"))
    if (auto dt = a.optDType("dtype")) x = cx.cast(x, *dt);
  return x;
}

/// Normalized reduction dims; empty means all. Absent or None `dim` is all.
std::vector<int64_t> reduceDims(NodeArgs& a, Value* x) {
  if (!a.has("dim") || !a.given("dim")) return {};
  auto dims = a.ints("dim");
  if (x->type().rank() == 0) return {};
  for (int64_t& d : dims) d = normDim(d, x->type().rank());
  return dims;
}

bool keepdim(NodeArgs& a) { return a.has("keepdim") && a.flag("keepdim"); }

/// sum / mean / amax / amin / prod.
FxValue lowerReduce(Lowering& cx, NodeArgs& a) {
  Value* x = input(cx, a);
  if (a.kiln == "mean" && !isFloating(x->dtype()))
    a.fail("self", "mean of " + x->type().str() + " needs a floating-point dtype");
  return FxValue::of(cx.emit(a.kiln, {x}, {{"dims", reduceDims(a, x)}, {"keepdim", int64_t{keepdim(a)}}}));
}

/// var / std: correction from `correction` (None = 1) or `unbiased`.
Value* variance(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  if (!isFloating(x->dtype())) a.fail("self", "variance of " + x->type().str() + " needs a floating-point dtype");
  double correction = 1;
  if (a.has("correction")) correction = a.optReal("correction").value_or(1.0);
  else if (a.has("unbiased")) correction = a.flag("unbiased") ? 1 : 0;
  return cx.emit("var", {x}, {{"dims", reduceDims(a, x)}, {"correction", correction}, {"keepdim", int64_t{keepdim(a)}}});
}

FxValue lowerVar(Lowering& cx, NodeArgs& a) { return FxValue::of(variance(cx, a)); }
FxValue lowerStd(Lowering& cx, NodeArgs& a) {
  return FxValue::of(decomp::zeroMaskedSqrt(cx, variance(cx, a)));
}

/// var_mean / std_mean(.correction) -> (var or std, mean) over the same dims.
FxValue lowerVarMean(Lowering& cx, NodeArgs& a) {
  Value* v = variance(cx, a);
  if (a.kiln == "std") v = decomp::zeroMaskedSqrt(cx, v);
  Value* x = a.tensor("self");
  Value* mean = cx.emit("mean", {x}, {{"dims", reduceDims(a, x)}, {"keepdim", int64_t{keepdim(a)}}});
  return FxValue::tuple({FxValue::of(v), FxValue::of(mean)});
}

/// all / any(self[, dim, keepdim]): whether every / some element is non-zero (bool).
FxValue lowerAllAny(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  Value* nz = cx.cast(cx.emit("ne", {x, cx.full(0.0, x->dtype())}), DType::I64);
  std::vector<int64_t> dims;
  if (a.has("dim")) dims = {normDim(a.integer("dim"), x->type().rank())};
  Value* r = cx.emit(a.kiln == "all" ? "amin" : "amax", {nz}, {{"dims", dims}, {"keepdim", int64_t{keepdim(a)}}});
  return FxValue::of(cx.cast(r, DType::Bool));
}

/// argmax / argmin(self, dim=None, keepdim): None flattens first.
Value* argReduce(Lowering& cx, std::string_view op, Value* x, std::optional<int64_t> dim, bool keep) {
  if (!dim) {
    Value* flat = cx.reshape(x, {x->type().numel()});
    Value* idx = cx.emit(op, {flat}, {{"dim", int64_t{0}}});
    return keep ? cx.reshape(idx, Shape(x->shape().size(), 1)) : idx;
  }
  int64_t d = normDim(*dim, x->type().rank());
  if (x->type().rank() == 0) return cx.emit(op, {cx.reshape(x, {1})}, {{"dim", int64_t{0}}});
  return cx.emit(op, {x}, {{"dim", d}, {"keepdim", int64_t{keep}}});
}

FxValue lowerArgReduce(Lowering& cx, NodeArgs& a) {
  return FxValue::of(argReduce(cx, a.kiln, a.tensor("self"), a.optInt("dim"), keepdim(a)));
}

/// max() / min() of all elements.
FxValue lowerExtremeOfAll(Lowering& cx, NodeArgs& a) {
  return FxValue::of(decomp::extremeOfAll(cx, a.tensor("self"), a.kiln == "amax"));
}

FxValue pairOf(decomp::ValuesIndices r) { return FxValue::tuple({FxValue::of(r.values), FxValue::of(r.indices)}); }

/// max.dim / min.dim -> (values, indices).
FxValue lowerMaxDim(Lowering& cx, NodeArgs& a) {
  return pairOf(decomp::maxMinDim(cx, a.tensor("self"), a.integer("dim"), keepdim(a), a.kiln == "amax"));
}

/// topk(self, k, dim=-1, largest=True, sorted=True): always sorted.
FxValue lowerTopk(Lowering& cx, NodeArgs& a) {
  return pairOf(decomp::topk(cx, a.tensor("self"), a.integer("k"), a.integer("dim"), a.flag("largest"), "topk"));
}

/// kthvalue(self, k, dim=-1, keepdim=False): the k-th smallest (1-based).
FxValue lowerKthvalue(Lowering& cx, NodeArgs& a) {
  return pairOf(decomp::kthvalue(cx, a.tensor("self"), a.integer("k"), a.integer("dim"), a.flag("keepdim")));
}

/// sort(self, dim=-1, descending=False) / sort.stable: ascending puts NaN last.
FxValue lowerSort(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  const int64_t dim = a.integer("dim");
  const int64_t size = x->type().rank() == 0 ? 1 : x->shape()[normDim(dim, x->type().rank())];
  return pairOf(decomp::topk(cx, x, size, dim, a.flag("descending"), "stable"));
}

/// argsort(.stable)(self, [stable,] dim, descending): sort's indices (Kiln's
/// topk breaks ties by position, so every sort is stable).
FxValue lowerArgsort(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  const int64_t dim = a.integer("dim");
  const int64_t size = x->type().rank() == 0 ? 1 : x->shape()[normDim(dim, x->type().rank())];
  return FxValue::of(decomp::topk(cx, x, size, dim, a.flag("descending"), "stable").indices);
}

/// logsumexp(self, dim, keepdim).
FxValue lowerLogsumexp(Lowering& cx, NodeArgs& a) {
  Value* x = input(cx, a);
  if (!isFloating(x->dtype())) x = cx.cast(x, DType::F32);
  return FxValue::of(decomp::logsumexp(cx, x, reduceDims(a, x), keepdim(a)));
}

/// norm.ScalarOpt_dim / norm.Scalar(self, p, dim, keepdim) and
/// linalg_vector_norm(self, ord, dim, keepdim): p = 1, 2 or inf.
FxValue lowerNorm(Lowering& cx, NodeArgs& a) {
  Value* x = input(cx, a);
  if (!isFloating(x->dtype())) x = cx.cast(x, DType::F32);
  const char* p_arg = a.has("ord") ? "ord" : "p";
  const double p = a.given(p_arg) ? a.real(p_arg) : 2.0;
  return FxValue::of(decomp::pnorm(cx, x, p, reduceDims(a, x), keepdim(a)));
}

/// cosine_similarity(x1, x2, dim=1, eps=1e-8).
FxValue lowerCosineSimilarity(Lowering& cx, NodeArgs& a) {
  Value* x1 = a.tensor("x1");
  Value* x2 = a.tensor("x2");
  DType t = promoteTypes(x1->dtype(), x2->dtype());
  if (!isFloating(t)) t = DType::F32;
  return FxValue::of(decomp::cosineSimilarity(cx, cx.cast(x1, t), cx.cast(x2, t), a.integer("dim"), a.real("eps")));
}

/// cumsum / cumprod(self, dim, dtype=None).
FxValue lowerCumsum(Lowering& cx, NodeArgs& a) {
  Value* x = input(cx, a);
  return FxValue::of(cx.emit(a.kiln, {x}, {{"dim", normDim(a.integer("dim"), x->type().rank())}}));
}

constexpr FxRule kRules[] = {
    {"aten.sum.default", lowerReduce, "sum"},
    {"aten.sum.dim_IntList", lowerReduce, "sum"},
    {"aten.mean.default", lowerReduce, "mean"},
    {"aten.mean.dim", lowerReduce, "mean"},
    {"aten.amax.default", lowerReduce, "amax"},
    {"aten.amin.default", lowerReduce, "amin"},
    {"aten.max.default", lowerExtremeOfAll, "amax"},
    {"aten.min.default", lowerExtremeOfAll, "amin"},
    {"aten.prod.default", lowerReduce, "prod"},
    {"aten.prod.dim_int", lowerReduce, "prod"},
    {"aten.max.dim", lowerMaxDim, "amax"},
    {"aten.min.dim", lowerMaxDim, "amin"},
    {"aten.var.default", lowerVar},
    {"aten.var.dim", lowerVar},
    {"aten.var.correction", lowerVar},
    {"aten.std.default", lowerStd},
    {"aten.std.dim", lowerStd},
    {"aten.std.correction", lowerStd},
    {"aten.var_mean.correction", lowerVarMean, "var"},
    {"aten.std_mean.correction", lowerVarMean, "std"},
    {"aten.all.default", lowerAllAny, "all"},
    {"aten.all.dim", lowerAllAny, "all"},
    {"aten.any.default", lowerAllAny, "any"},
    {"aten.any.dim", lowerAllAny, "any"},
    {"aten.argmax.default", lowerArgReduce, "argmax"},
    {"aten.argmin.default", lowerArgReduce, "argmin"},
    {"aten.cumsum.default", lowerCumsum, "cumsum"},
    {"aten.cumprod.default", lowerCumsum, "cumprod"},
    {"aten.logsumexp.default", lowerLogsumexp},
    {"aten.norm.ScalarOpt_dim", lowerNorm},
    {"aten.norm.Scalar", lowerNorm},
    {"aten.linalg_vector_norm.default", lowerNorm},
    {"aten.cosine_similarity.default", lowerCosineSimilarity},
    {"aten.topk.default", lowerTopk},
    {"aten.kthvalue.default", lowerKthvalue},
    {"aten.sort.default", lowerSort},
    {"aten.sort.stable", lowerSort},
    {"aten.argsort.default", lowerArgsort},
    {"aten.argsort.stable", lowerArgsort},
};

}  // namespace

std::span<const FxRule> reductionRules() { return kRules; }

}  // namespace kiln::fx
