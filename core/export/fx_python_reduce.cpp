// fx export of the reduction and loss families (core/ops/reduction*.cpp,
// loss*.cpp). Reductions take Kiln's normalized axis list explicitly (never
// aten's "empty means all", whose meaning varies by op). The loss forwards
// are aten's cross_entropy_loss / nll_loss_nd / mse_loss. The loss
// backwards have no aten op of that shape (PyTorch differentiates the
// log_softmax + nll_loss decomposition instead), so they are written out as
// Kiln's kernels compute them (backend/cpu/kernels_loss_grad.cpp): per
// target that is not ignore_index, scale * (softmax - s/C - (1-s) one_hot)
// for cross_entropy and -scale at the target class for nll_loss, with
// scale = g / (targets kept) for "mean", g for "sum", g per target for
// "none", and zero rows for ignored targets; in double and rounded once
// at the end, as the kernels do. prod_backward follows Kiln's three cases
// (no zero in the slice, one zero, several).
#include <cmath>

#include "core/export/fx_python_ops.h"
#include "core/ops/op_helpers.h"

namespace kiln::fx {
namespace {

std::vector<int64_t> axesOf(const Node& n, const Value* x) {
  return reductionAxes(n, n.is("dims"), x->type().rank());
}

std::vector<int64_t> shapeOf(const Value* v) {
  return {v->shape().begin(), v->shape().end()};
}

void emitSumMean(Emitter& e, const Node& n) {
  e.setOut(n, 0, emitSumOrMean(e, n.is(Op::mean), e.in(n, 0), axesOf(n, n.input(0)), n.i("keepdim") != 0));
}

void emitAmaxAmin(Emitter& e, const Node& n) {
  const char* target = n.is(Op::amax) ? "aten.amax.default" : "aten.amin.default";
  e.setOut(n, 0, e.call(target, {e.in(n, 0), pyInts(axesOf(n, n.input(0))), pyBool(n.i("keepdim") != 0)}));
}

/// The product over `axes` with the reduced dims kept (aten's prod takes one dim at a time).
std::string prodKept(Emitter& e, std::string x, const std::vector<int64_t>& axes) {
  for (int64_t a : axes) x = e.call("aten.prod.dim_int", {x, pyInt(a), "True"});
  return x;
}

void emitProd(Emitter& e, const Node& n) {
  const std::vector<int64_t> axes = axesOf(n, n.input(0));
  const bool keepdim = n.i("keepdim") != 0;
  if (!keepdim && static_cast<int64_t>(axes.size()) == n.input(0)->type().rank())
    return e.setOut(n, 0, e.call("aten.prod.default", {e.in(n, 0)}));
  std::string r = prodKept(e, e.in(n, 0), axes);
  if (!keepdim) r = e.call("aten.reshape.default", {r, pyInts(shapeOf(n.output()))});
  e.setOut(n, 0, r);
}

void emitVar(Emitter& e, const Node& n) {
  const std::vector<int64_t> axes = axesOf(n, n.input(0));
  const double correction = n.f("correction");
  const bool keepdim = n.i("keepdim") != 0;
  if (correction == std::floor(correction))  // aten 1.13 takes an integer correction
    return e.setOut(n, 0,
                    e.call("aten.var.correction", {e.in(n, 0), pyInts(axes)},
                           {"correction=" + pyInt(static_cast<int64_t>(correction)), "keepdim=" + pyBool(keepdim)}));
  // sum((x - mean)^2) / (N - correction)
  double count = 1;
  for (int64_t a : axes) count *= static_cast<double>(n.input(0)->shape()[a]);
  std::string d = e.call("aten.sub.Tensor", {e.in(n, 0), emitSumOrMean(e, true, e.in(n, 0), axes, true)});
  std::string s = emitSumOrMean(e, false, e.call("aten.mul.Tensor", {d, d}), axes, keepdim);
  e.setOut(n, 0, e.call("aten.div.Scalar", {s, pyFloat(count - correction)}));
}

void emitArg(Emitter& e, const Node& n) {
  const char* target = n.is(Op::argmax) ? "aten.argmax.default" : "aten.argmin.default";
  e.setOut(n, 0, e.call(target, {e.in(n, 0), pyInt(n.i("dim")), pyBool(n.i("keepdim") != 0)}));
}

/// Kiln's topk by its `ties` (NaN first among the largest in every mode):
/// "stable" is a stable sort's order cut to k, aten.sort.stable then a
/// slice; "topk" is torch.topk's (on the CPU the same order); "kthvalue" is
/// topk's k-1 smallest, then torch.kthvalue's index (the one Kiln's
/// kthvalue reads; the k-1 before it, which no imported graph reads, may be
/// in another order than Kiln's quickselect leaves).
void emitTopk(Emitter& e, const Node& n) {
  const int64_t dim = n.i("dim"), k = n.i("k");
  const bool largest = n.i("largest") != 0;
  const std::string& ties = n.s("ties");
  const std::string x = e.in(n, 0);
  if (ties == "topk") {
    e.setOut(n, 0, e.item(e.call("aten.topk.default", {x, pyInt(k), pyInt(dim), pyBool(largest), "True"}), 1));
    return;
  }
  if (ties == "kthvalue") {
    const std::string smaller = e.item(e.call("aten.topk.default", {x, pyInt(k - 1), pyInt(dim), "False", "True"}), 1);
    const std::string kth = e.item(e.call("aten.kthvalue.default", {x, pyInt(k), pyInt(dim), "True"}), 1);
    e.setOut(n, 0, e.call("aten.cat.default", {"[" + smaller + ", " + kth + "]", pyInt(dim)}));
    return;
  }
  const std::string sorted =
      e.call("aten.sort.stable", {x}, {"stable=True", "dim=" + pyInt(dim), "descending=" + pyBool(largest)});
  e.setOut(n, 0, e.call("aten.slice.Tensor", {e.item(sorted, 1), pyInt(dim), "0", pyInt(k)}));
}

void emitCumsum(Emitter& e, const Node& n) {
  e.setOut(n, 0, e.call("aten." + n.op() + ".default", {e.in(n, 0), pyInt(n.i("dim"))}));
}

/// Per slice: no zero: g * (y / x); one zero: that element gets g times the
/// product of the others, the rest 0; several zeros: all 0.
void emitProdBackward(Emitter& e, const Node& n) {
  const DType t = n.output()->dtype();
  const std::string g = e.cast(e.in(n, 0), n.input(0)->dtype(), t);
  const std::string x = e.cast(e.in(n, 1), n.input(1)->dtype(), t);
  const std::string y = e.cast(e.in(n, 2), n.input(2)->dtype(), t);
  const std::vector<int64_t> axes = axesOf(n, n.input(1));
  const std::vector<int64_t> kept = reducedShape(n.input(1)->shape(), axes, true);
  const std::string gk = e.call("aten.reshape.default", {g, pyInts(kept)});
  const std::string yk = e.call("aten.reshape.default", {y, pyInts(kept)});
  const std::string zero = e.call("aten.eq.Scalar", {x, "0"});
  const std::string zeros = e.call("aten.sum.dim_IntList", {zero, pyInts(axes), "True"});
  const std::string fast = e.call("aten.mul.Tensor", {gk, e.call("aten.div.Tensor", {yk, x})});
  const std::string others = prodKept(e, e.call("aten.where.ScalarSelf", {zero, "1.0", x}), axes);
  const std::string one = e.call("aten.where.ScalarOther", {zero, e.call("aten.mul.Tensor", {gk, others}), "0.0"});
  const std::string slow = e.call("aten.where.ScalarOther", {e.call("aten.eq.Scalar", {zeros, "1"}), one, "0.0"});
  e.setOut(n, 0, e.call("aten.where.self", {e.call("aten.eq.Scalar", {zeros, "0"}), fast, slow}));
}

// ---- losses -------------------------------------------------------------------------

int64_t reductionCode(const Node& n) {  // at::Reduction: None 0, Mean 1, Sum 2
  const std::string& r = n.s("reduction");
  if (r == "none") return 0;
  if (r == "mean") return 1;
  if (r == "sum") return 2;
  refuse(n, "unknown reduction '" + r + "'");
}

std::string longTarget(Emitter& e, const Node& n, size_t i) {
  return e.cast(e.in(n, i), n.input(i)->dtype(), DType::I64);
}

void emitCrossEntropy(Emitter& e, const Node& n) {
  // {dtype=f32} over bf16/f16 logits: the widening cast it reads through.
  const std::string x = e.cast(e.in(n, 0), n.input(0)->dtype(), n.output()->dtype());
  e.setOut(n, 0,
           e.call("aten.cross_entropy_loss.default", {x, longTarget(e, n, 1), "None", pyInt(reductionCode(n)),
                                                      pyInt(n.i("ignore_index")), pyFloat(n.f("label_smoothing"))}));
}

void emitNllLoss(Emitter& e, const Node& n) {
  e.setOut(n, 0,
           e.call("aten.nll_loss_nd.default",
                  {e.in(n, 0), longTarget(e, n, 1), "None", pyInt(reductionCode(n)), pyInt(n.i("ignore_index"))}));
}

void emitMseLoss(Emitter& e, const Node& n) {
  e.setOut(n, 0, e.call("aten.mse_loss.default", {e.in(n, 0), e.in(n, 1), pyInt(reductionCode(n))}));
}

/// What the class-loss backwards share: the class dim, which targets count,
/// the target classes as an index along the class dim, and the per-target
/// scale, shaped to broadcast over the classes.
struct ClassLossGrad {
  int64_t class_dim;
  std::string kept;   ///< bool, target shape unsqueezed at class_dim
  std::string index;  ///< int64 classes (ignored targets -> 0), unsqueezed
  std::string scale;  ///< g / kept count, g, or g per target unsqueezed; in double
};

ClassLossGrad classLossGrad(Emitter& e, const Node& n, size_t g_in, size_t target_in, int64_t input_rank) {
  ClassLossGrad c;
  c.class_dim = input_rank == 1 ? 0 : 1;
  const std::string cd = pyInt(c.class_dim);
  const std::string target = longTarget(e, n, target_in);
  const std::string valid = e.call("aten.ne.Scalar", {target, pyInt(n.i("ignore_index"))});
  c.kept = e.call("aten.unsqueeze.default", {valid, cd});
  c.index = e.call("aten.unsqueeze.default", {e.call("aten.where.ScalarOther", {valid, target, "0"}), cd});
  const int64_t reduction = reductionCode(n);
  const std::string g = e.cast(e.in(n, g_in), n.input(g_in)->dtype(), DType::F64);
  if (reduction == 1)
    c.scale = e.call("aten.div.Tensor", {g, e.call("aten.sum.default", {valid})});
  else if (reduction == 2)
    c.scale = g;
  else
    c.scale = e.call("aten.unsqueeze.default", {g, cd});
  return c;
}

/// Computed in double and rounded once, as Kiln's kernel does (its softmax
/// and scale are doubles whatever the logits' dtype).
void emitCrossEntropyBackward(Emitter& e, const Node& n) {
  const DType t = n.input(1)->dtype();
  const std::string x = e.cast(e.in(n, 1), t, DType::F64);
  const int64_t rank = n.input(1)->type().rank();
  const ClassLossGrad c = classLossGrad(e, n, 0, 2, rank);
  const double s = n.f("label_smoothing");
  const int64_t classes = n.input(1)->shape()[c.class_dim];
  std::string d = e.call("aten._softmax.default", {x, pyInt(c.class_dim), "False"});
  if (s != 0) d = e.call("aten.sub.Scalar", {d, pyFloat(s / static_cast<double>(classes))});
  std::string mass = e.call("aten.scatter.value",
                            {e.call("aten.zeros_like.default", {x}), pyInt(c.class_dim), c.index, pyFloat(1.0 - s)});
  d = e.call("aten.mul.Tensor", {e.call("aten.sub.Tensor", {d, mass}), c.scale});
  e.setOut(n, 0, e.cast(e.call("aten.where.ScalarOther", {c.kept, d, "0.0"}), DType::F64, t));
}

/// -scale at each kept target's class, in double, rounded once (Kiln's kernel).
void emitNllLossBackward(Emitter& e, const Node& n) {
  const DType t = n.output()->dtype();
  const std::vector<int64_t> shape = shapeOf(n.output());
  const ClassLossGrad c = classLossGrad(e, n, 0, 1, static_cast<int64_t>(shape.size()));
  std::string one_hot = e.call("aten.scatter.value", {e.call("aten.new_zeros.default", {c.scale, pyInts(shape)}),
                                                      pyInt(c.class_dim), c.index, "1.0"});
  std::string d = e.call("aten.mul.Tensor", {one_hot, e.call("aten.neg.default", {c.scale})});
  e.setOut(n, 0, e.cast(e.call("aten.where.ScalarOther", {c.kept, d, "0.0"}), DType::F64, t));
}

}  // namespace

void addReduceLossEmitters(EmitTable& t) {
  t["sum"] = emitSumMean;
  t["mean"] = emitSumMean;
  t["amax"] = emitAmaxAmin;
  t["amin"] = emitAmaxAmin;
  t["prod"] = emitProd;
  t["var"] = emitVar;
  t["argmax"] = emitArg;
  t["argmin"] = emitArg;
  t["cumsum"] = emitCumsum;
  t["cumprod"] = emitCumsum;
  t["topk"] = emitTopk;
  t["prod_backward"] = emitProdBackward;
  t["cross_entropy"] = emitCrossEntropy;
  t["nll_loss"] = emitNllLoss;
  t["mse_loss"] = emitMseLoss;
  t["cross_entropy_backward"] = emitCrossEntropyBackward;
  t["nll_loss_backward"] = emitNllLossBackward;
}

}  // namespace kiln::fx
