// aten -> Kiln: reductions (sum, mean, amax/amin, max/min with indices,
// prod, var/std, norms, logsumexp, all/any), arg-reductions and cumsum.
// Dims are normalized; no dims (None or []) means all of them, as in Kiln.
#include <cmath>
#include <limits>

#include "core/import/decompositions/index.h"
#include "core/import/decompositions/math.h"
#include "core/import/torchscript/lowering.h"
#include "core/result.h"

namespace kiln::ts {
namespace {

using Out = std::vector<SV>;

/// Reduction dims from argument k: None / [] -> all, an int or a list -> normalized.
std::vector<int64_t> dimsArg(const Args& a, size_t k, int64_t rank) {
  if (!a.given(k)) return {};
  std::vector<int64_t> dims = a.ints(k);
  for (int64_t& d : dims) d = normDim(d, rank);
  if (rank == 0) dims.clear();
  return dims;
}

Value* reduce(Lowering& cx, std::string_view op, Value* x, const std::vector<int64_t>& dims, bool keepdim) {
  return cx.emit(op, {x}, {{"dims", dims}, {"keepdim", int64_t{keepdim}}});
}

// sum/mean/prod(self, dtype=None) or (self, dim, keepdim=False, dtype=None)
Out lowerSumLike(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  bool full = a.size() <= 2;
  size_t dtype_at = full ? 1 : 3;
  if (auto t = a.optDType(dtype_at)) x = cx.cast(x, *t);
  if (a.kiln_op == "mean" && !isFloating(x->dtype()))
    fail("mean() of an integer tensor needs a floating-point dtype argument");
  if (full) return single(cx, reduce(cx, a.kiln_op, x, {}, false));
  return single(cx, reduce(cx, a.kiln_op, x, dimsArg(a, 1, x->type().rank()), a.given(2) && a.flag(2)));
}

// amax/amin(self, dim=[], keepdim=False)
Out lowerAmax(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  return single(cx, reduce(cx, a.kiln_op, x, dimsArg(a, 1, x->type().rank()), a.given(2) && a.flag(2)));
}

Out pairOf(Lowering& cx, decomp::ValuesIndices r) {
  return {cx.fresh(r.values), cx.fresh(r.indices)};
}

// max/min(self) -> all; (self, dim, keepdim) -> (values, indices); (self, other) -> elementwise
Out lowerMaxMin(Lowering& cx, Args& a) {
  bool is_max = a.kiln_op == "max";
  if (a.size() == 1) return single(cx, decomp::extremeOfAll(cx, a.tensor(0), is_max));
  if (a[1].isTensorLike()) {
    DType t = resultType(a[0], a[1]);
    return single(cx, cx.emit(is_max ? "maximum" : "minimum", {cx.operand(a[0], t), cx.operand(a[1], t)}));
  }
  return pairOf(cx, decomp::maxMinDim(cx, a.tensor(0), a.integer(1), a.given(2) && a.flag(2), is_max));
}

// kthvalue(self, k, dim=-1, keepdim=False) -> (values, indices): the k-th smallest (1-based)
Out lowerKthvalue(Lowering& cx, Args& a) {
  return pairOf(cx, decomp::kthvalue(cx, a.tensor(0), a.integer(1), a.given(2) ? a.integer(2) : -1,
                                     a.given(3) && a.flag(3)));
}

// topk(self, k, dim=-1, largest=True, sorted=True) -> (values, indices); always sorted
Out lowerTopk(Lowering& cx, Args& a) {
  return pairOf(cx, decomp::topk(cx, a.tensor(0), a.integer(1), a.given(2) ? a.integer(2) : -1,
                                 !a.given(3) || a.flag(3), "topk"));
}

// sort(self, dim=-1, descending=False) / sort.stable(self, *, stable, dim=-1, descending=False)
// and argsort with the same arguments: ascending puts NaN last, descending first.
Out lowerSort(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  const size_t at = a.size() == 4 ? 2 : 1;  // .stable has the `stable` flag before dim
  const int64_t dim = a.given(at) ? a.integer(at) : -1;
  const bool descending = a.given(at + 1) && a.flag(at + 1);
  const int64_t size = x->type().rank() == 0 ? 1 : x->shape()[normDim(dim, x->type().rank())];
  Out out = pairOf(cx, decomp::topk(cx, x, size, dim, descending, "stable"));
  if (a.kiln_op == "argsort") return {out[1]};
  return out;
}

// argmax/argmin(self, dim=None, keepdim=False)
Out lowerArgReduce(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  if (!a.given(1)) {
    Value* flat = cx.emit("reshape", {x}, {{"shape", Shape{x->type().numel()}}});
    return single(cx, cx.emit(a.kiln_op, {flat}, {{"dim", int64_t{0}}, {"keepdim", int64_t{0}}}));
  }
  int64_t d = normDim(a.integer(1), x->type().rank());
  return single(cx, cx.emit(a.kiln_op, {x}, {{"dim", d}, {"keepdim", int64_t{a.given(2) && a.flag(2)}}}));
}

/// var(x) with `correction`, or its square root for std.
Value* variance(Lowering& cx, Value* x, const std::vector<int64_t>& dims, double correction, bool keepdim, bool root) {
  if (!isFloating(x->dtype())) fail("var()/std() need a floating-point input, got " + x->type().str());
  Value* v = cx.emit("var", {x}, {{"dims", dims}, {"correction", correction}, {"keepdim", int64_t{keepdim}}});
  return root ? decomp::zeroMaskedSqrt(cx, v) : v;
}

/// Parse var/std overloads: (self, unbiased), (self, dim, unbiased, keepdim),
/// (self, dim, correction=None, keepdim) -- correction is a number or None, unbiased a bool.
struct VarArgs {
  std::vector<int64_t> dims;
  double correction = 1;
  bool keepdim = false;
};

VarArgs varArgs(const Args& a, int64_t rank) {
  VarArgs v;
  if (a.size() <= 2) {
    if (a.given(1)) v.correction = a.flag(1) ? 1 : 0;
    return v;
  }
  v.dims = dimsArg(a, 1, rank);
  if (a[2].kind == SV::Kind::Bool)
    v.correction = a.flag(2) ? 1 : 0;
  else if (a.given(2))
    v.correction = a.real(2);
  v.keepdim = a.given(3) && a.flag(3);
  return v;
}

// var/std(...); var_mean/std_mean(...) -> (var or std, mean)
Out lowerVar(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  VarArgs v = varArgs(a, x->type().rank());
  bool root = a.kiln_op == "std" || a.kiln_op == "std_mean";
  Value* out = variance(cx, x, v.dims, v.correction, v.keepdim, root);
  if (a.kiln_op == "var" || a.kiln_op == "std") return single(cx, out);
  return {cx.fresh(out), cx.fresh(reduce(cx, "mean", x, v.dims, v.keepdim))};
}

// cumsum / cumprod(self, dim, dtype=None)
Out lowerCumsum(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  if (auto t = a.optDType(2)) x = cx.cast(x, *t);
  return single(cx, cx.emit(a.kiln_op, {x}, {{"dim", normDim(a.integer(1), x->type().rank())}}));
}

// logsumexp(self, dim, keepdim) = m + log(sum(exp(x - m))), m = amax(x) for stability
Out lowerLogsumexp(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  if (!isFloating(x->dtype())) x = cx.cast(x, DType::F32);
  return single(cx, decomp::logsumexp(cx, x, dimsArg(a, 1, x->type().rank()), a.given(2) && a.flag(2)));
}

/// p-norm over dims for p = 1, 2, inf (integers in f32).
Value* pnorm(Lowering& cx, Value* x, double p, const std::vector<int64_t>& dims, bool keep) {
  if (!isFloating(x->dtype())) x = cx.cast(x, DType::F32);
  return decomp::pnorm(cx, x, p, dims, keep);
}

// norm(self, p=2, dim=None, keepdim=False, ...) / linalg_vector_norm(self, ord=2, dim=None, keepdim, dtype)
// / frobenius_norm(self, dim, keepdim)
Out lowerNorm(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  int64_t r = x->type().rank();
  if (a.kiln_op == "frobenius") return single(cx, pnorm(cx, x, 2, dimsArg(a, 1, r), a.given(2) && a.flag(2)));
  double p = a.given(1) ? a.real(1) : 2.0;
  return single(cx, pnorm(cx, x, p, dimsArg(a, 2, r), a.given(3) && a.flag(3)));
}

// cosine_similarity(x1, x2, dim=1, eps=1e-8)
Out lowerCosineSimilarity(Lowering& cx, Args& a) {
  DType t = resultType(a[0], a[1]);
  if (!isFloating(t)) t = DType::F32;
  Value* x1 = cx.operand(a[0], t);
  Value* x2 = cx.operand(a[1], t);
  return single(cx, decomp::cosineSimilarity(cx, x1, x2, a.given(2) ? a.integer(2) : 1, a.given(3) ? a.real(3) : 1e-8));
}

// all/any(self) or (self, dim, keepdim) on tensors -> bool
Out lowerAllAny(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  Value* nz = cx.cast(cx.emit("ne", {x, cx.scalar(0, x->dtype())}), DType::I64);
  std::vector<int64_t> dims = a.size() > 1 ? dimsArg(a, 1, x->type().rank()) : std::vector<int64_t>{};
  Value* r = reduce(cx, a.kiln_op == "all" ? "amin" : "amax", nz, dims, a.given(2) && a.flag(2));
  return single(cx, cx.cast(r, DType::Bool));
}

const AtenRule kRules[] = {
    {"aten::sum", lowerSumLike, "sum"},
    {"aten::mean", lowerSumLike, "mean"},
    {"aten::prod", lowerSumLike, "prod"},
    {"aten::amax", lowerAmax, "amax"},
    {"aten::amin", lowerAmax, "amin"},
    {"aten::max", lowerMaxMin, "max"},
    {"aten::min", lowerMaxMin, "min"},
    {"aten::argmax", lowerArgReduce, "argmax"},
    {"aten::argmin", lowerArgReduce, "argmin"},
    {"aten::var", lowerVar, "var"},
    {"aten::std", lowerVar, "std"},
    {"aten::var_mean", lowerVar, "var_mean"},
    {"aten::std_mean", lowerVar, "std_mean"},
    {"aten::cumsum", lowerCumsum, "cumsum"},
    {"aten::cumprod", lowerCumsum, "cumprod"},
    {"aten::topk", lowerTopk},
    {"aten::kthvalue", lowerKthvalue},
    {"aten::sort", lowerSort, "sort"},
    {"aten::argsort", lowerSort, "argsort"},
    {"aten::logsumexp", lowerLogsumexp},
    {"aten::norm", lowerNorm, "norm"},
    {"aten::linalg_vector_norm", lowerNorm, "norm"},
    {"aten::frobenius_norm", lowerNorm, "frobenius"},
    {"aten::cosine_similarity", lowerCosineSimilarity},
    {"aten::all", lowerAllAny, "all"},
    {"aten::any", lowerAllAny, "any"},
};

}  // namespace

std::span<const AtenRule> reductionRules() {
  return kRules;
}

}  // namespace kiln::ts
